// Package kmod handles the few Linux kernel modules the boot image carries
// (virtio_net and what it depends on, for the qemu test; whatever a real
// DPU's kernel leaves as modules).
//
// On the build host it reads a kernel's module tree: the .modinfo section of
// each module (name, depends, vermagic), the list of built-in modules, and
// orders a wanted set with its dependencies first (Tree, Resolve). It writes
// the staged tree the image carries: the modules, uncompressed, a
// modules.dep in kmod's format and a load list, LoadListName, one module
// path a line in load order (Stage).
//
// In the guest it loads that list through a Loader (finit_module in
// KernelLoader; tests use an in-memory one).
//
// It must never guess: a module that is neither in the tree nor built in is
// an error, and so is a dependency cycle. It never unloads a module.
package kmod
