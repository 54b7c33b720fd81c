// Command modstage picks kernel modules and their dependencies out of an
// unpacked kernel's module tree and stages them for the boot image:
//
//	modstage -tree DIR/lib/modules/RELEASE -o STAGE virtio_net virtio_pci
//
// STAGE/lib/modules/RELEASE then holds the modules (uncompressed), a
// modules.dep and the load list that images/cmd/uinit loads at boot. The
// image build adds STAGE to the initramfs.
//
// It runs on the build host only; it never loads a module.
package main
