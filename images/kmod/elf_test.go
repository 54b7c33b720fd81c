package kmod

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// fakeModule returns a minimal ELF64 little-endian relocatable object with
// a .modinfo section, as a kernel module has: enough for ReadModinfo.
func fakeModule(name string, depends []string, vermagic string) []byte {
	modinfo := "license=GPL\x00" +
		"depends=" + strings.Join(depends, ",") + "\x00" +
		"name=" + name + "\x00" +
		"vermagic=" + vermagic + "\x00"
	return fakeELF(".modinfo", []byte(modinfo))
}

// fakeELF returns an ELF64 object whose only section (besides the null
// section and the section name table) is secName holding data.
func fakeELF(secName string, data []byte) []byte {
	const (
		ehsize    = 64
		shentsize = 64
	)
	shstrtab := []byte("\x00" + secName + "\x00.shstrtab\x00")
	dataOff := uint64(ehsize)
	strOff := dataOff + uint64(len(data))
	shOff := (strOff + uint64(len(shstrtab)) + 7) &^ 7

	var b bytes.Buffer
	le := binary.LittleEndian
	ident := [16]byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1 /* version */}
	b.Write(ident[:])
	binary.Write(&b, le, uint16(1))      // e_type: ET_REL
	binary.Write(&b, le, uint16(183))    // e_machine: EM_AARCH64
	binary.Write(&b, le, uint32(1))      // e_version
	binary.Write(&b, le, uint64(0))      // e_entry
	binary.Write(&b, le, uint64(0))      // e_phoff
	binary.Write(&b, le, shOff)          // e_shoff
	binary.Write(&b, le, uint32(0))      // e_flags
	binary.Write(&b, le, uint16(ehsize)) // e_ehsize
	binary.Write(&b, le, uint16(0))      // e_phentsize
	binary.Write(&b, le, uint16(0))      // e_phnum
	binary.Write(&b, le, uint16(shentsize))
	binary.Write(&b, le, uint16(3)) // e_shnum
	binary.Write(&b, le, uint16(2)) // e_shstrndx
	b.Write(data)
	b.Write(shstrtab)
	for uint64(b.Len()) < shOff {
		b.WriteByte(0)
	}
	section := func(name uint32, typ uint32, off, size uint64) {
		binary.Write(&b, le, name)
		binary.Write(&b, le, typ)
		binary.Write(&b, le, uint64(0)) // flags
		binary.Write(&b, le, uint64(0)) // addr
		binary.Write(&b, le, off)
		binary.Write(&b, le, size)
		binary.Write(&b, le, uint32(0)) // link
		binary.Write(&b, le, uint32(0)) // info
		binary.Write(&b, le, uint64(1)) // addralign
		binary.Write(&b, le, uint64(0)) // entsize
	}
	section(0, 0, 0, 0)                                                            // null
	section(1, 1 /* PROGBITS */, dataOff, uint64(len(data)))                       // secName
	section(uint32(2+len(secName)), 3 /* STRTAB */, strOff, uint64(len(shstrtab))) // .shstrtab
	return b.Bytes()
}
