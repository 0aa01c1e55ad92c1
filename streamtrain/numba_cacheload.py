"""numba's cache loads without parsing each kernel's linkable bitcode (``numba_startup.patch``).

numba keeps a cached kernel as its object code and, beside it, the LLVM bitcode other kernels
link against; loading the kernel parses that bitcode (LLVM's ParseBitcode, about half of the
load) only to list what the kernel defines. ``bitcode_parsed_when_linked`` lists it from the
object code's ELF symbol table instead (``defined``: the same names, checked by
``tests/test_numba_startup.py`` against the bitcode's) and parses the bitcode when a compile
first links against the kernel. Object code that is not 64-bit little-endian ELF loads as numba
loads it.
"""
from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_STT_SECTION, _STT_FILE = 3, 4


def defined(obj: bytes) -> set[str] | None:
    """Names of the symbols a 64-bit little-endian ELF relocatable object defines (in a section:
    functions, data; not sections or file names); ``None`` for any other format or a file that
    does not parse, for the caller to fall back on."""
    try:
        if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
            return None
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        names: set[str] = set()
        found = False
        for i in range(shnum):
            head = shoff + i * shentsize
            if struct.unpack_from("<I", obj, head + 4)[0] != _SHT_SYMTAB:
                continue
            found = True
            offset, size, link = struct.unpack_from("<QQI", obj, head + 0x18)
            entsize, = struct.unpack_from("<Q", obj, head + 0x38)
            strtab, = struct.unpack_from("<Q", obj, shoff + link * shentsize + 0x18)
            for sym in range(offset + entsize, offset + size, entsize):      # entry 0 is the null symbol
                name, info, _, shndx = struct.unpack_from("<IBBH", obj, sym)
                if shndx == 0 or (info & 0xF) in (_STT_SECTION, _STT_FILE) or not name:
                    continue
                end = obj.index(b"\0", strtab + name)
                names.add(obj[strtab + name:end].decode())
        return names if found else None
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return None


def bitcode_parsed_when_linked() -> None:
    """A cached kernel's linkable bitcode parsed only when a compile links against it; what it
    defines listed from its object code (module docstring)."""
    import llvmlite.binding as ll
    from numba.core.codegen import CPUCodeLibrary
    unserialize, for_linking = CPUCodeLibrary._unserialize.__func__, CPUCodeLibrary._get_module_for_linking
    if not all(hasattr(CPUCodeLibrary, n) for n in ("_set_compiled_object", "_finalize_final_module")):
        raise AttributeError("numba.core.codegen.CPUCodeLibrary has no _set_compiled_object or _finalize_final_module")

    def _unserialize(cls, codegen, state):
        name, kind, data = state
        names = defined(data[0]) if kind == "object" else None
        if names is None:
            return unserialize(cls, codegen, state)
        self = codegen.create_library(name)
        self.enable_object_caching()
        self._set_compiled_object(data[0])
        self._streamtrain_bitcode = data[1]
        self._finalize_final_module()
        codegen._engine._defined_symbols |= names
        return self

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_streamtrain_bitcode", None)
        if bitcode is not None:
            self._shared_module = ll.parse_bitcode(bitcode)
        return for_linking(self)
    for fn in (_unserialize, _get_module_for_linking):
        fn._streamtrain = True
    CPUCodeLibrary._unserialize = classmethod(_unserialize)
    CPUCodeLibrary._get_module_for_linking = _get_module_for_linking
