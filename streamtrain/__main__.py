from streamtrain.cli import entry

if __name__ == "__main__":           # `python -m streamtrain`; importing the module runs nothing
    entry()
