# images/image.mk — the boot image for the DPU's Arm cores (included by the
# Makefile). See images/README.md.
#
#   make image                 images/out/dpu-arm64.cpio.gz (u-root initramfs)
#   make image ARCH=amd64      images/out/dpu-amd64.cpio.gz
#   make image IMAGE_MODULES=DIR   also carry a staged module tree (modstage -o DIR)
#   make image IMAGE_CONF=FILE     carry FILE as /etc/dpu/agent.conf
#   make image-test            fetch a Debian arm64 kernel, build the image with
#                              its virtio modules, boot it under qemu and check it
#   make rdma-test             the same with two amd64 guests, soft-RoCE (rdma_rxe)
#                              and the rdma-tagged agent: RoCE ports between them
#   make numa-test             one amd64 guest with two NUMA nodes, its NIC on
#                              node 1: the agent must find the layout and bind
#                              its threads and page memory to node 1
#   make image-oci             images/out/dpu-agent-oci/ (an OCI image layout) and
#                              images/out/dpu-agent-oci.tar (the same as an
#                              oci-archive): the container image of dpu-agent and
#                              dpuctl (static), built with no container daemon
#   make image-oci OCI_ARCH=arm64   the same for arm64

IMAGE_ARCH    := $(if $(ARCH),$(ARCH),arm64)
IMAGE_OUT     := images/out
IMAGE_CACHE   := images/cache
IMAGE_MODULES ?=
IMAGE_CONF    ?=
# u-root's commands in the image (pinned in go.mod through images/deps.go).
IMAGE_UROOT   := init gosh ip insmod dmesg cat ls shutdown
# Our commands: the firmware, its CLI, and the boot sequence.
IMAGE_CMDS    := ./cmd/dpu-agent ./cmd/dpuctl ./images/cmd/uinit
# Kernel modules the qemu test needs from the Debian kernel (with their
# dependencies, found by modstage).
VMTEST_MODULES := virtio_pci virtio_net
VMTEST_KERNEL  := $(IMAGE_CACHE)/arm64
VMTEST_TIMEOUT ?= 60s
# More vmtest flags, e.g. VMTEST_ARGS="-run single,pair,shell,pair-afpacket,pair-udp".
VMTEST_ARGS    ?=
# The RoCE boot test: amd64 guests (TCG), soft-RoCE, the cgo agent.
RDMATEST_MODULES := virtio_pci virtio_net crc32_generic rdma_rxe
RDMATEST_KERNEL  := $(IMAGE_CACHE)/amd64
RDMATEST_OUT     := $(IMAGE_OUT)/rdma
RDMATEST_TIMEOUT ?= 240s
# The NUMA boot test: one amd64 guest (TCG), two NUMA nodes.
NUMATEST_MODULES := virtio_pci virtio_net
NUMATEST_KERNEL  := $(IMAGE_CACHE)/amd64-numa
NUMATEST_TIMEOUT ?= 240s

.PHONY: image image-test image-clean rdma-test numa-test image-oci

OCI_ARCH ?= amd64

# The container image (images/oci): static binaries, one layer, no base.
# images/oci's TestAgentImageRunsUnderRunc runs the same image under runc.
image-oci: bpf
	@mkdir -p $(IMAGE_OUT)/oci-$(OCI_ARCH)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(OCI_ARCH) $(GO) build -trimpath -o $(IMAGE_OUT)/oci-$(OCI_ARCH)/ ./cmd/dpu-agent ./cmd/dpuctl
	$(GO) run ./images/cmd/ociimage --arch $(OCI_ARCH) --bin $(IMAGE_OUT)/oci-$(OCI_ARCH) \
		--layout $(IMAGE_OUT)/dpu-agent-oci --archive $(IMAGE_OUT)/dpu-agent-oci.tar

# image-build ARCH,MODULES: u-root's mkuimage (the version go.mod's tool
# directive pins, built for this host) compiles every command into one
# busybox-style binary (bbin/bb) and writes the cpio; /init is u-root's init,
# /bin/sh gosh. init runs every uinit it finds (/bbin/uinit, /bin/uinit, …),
# so there is no /bin/uinit link: /bbin/uinit, ours, runs once. gosh is built
# with goshsmall, its plain line editor, which works on any serial console.
# MODULES is a staged module tree or empty; EXTRA more mkuimage arguments.
define image-build
	@mkdir -p $(IMAGE_OUT)
	$(GO) build -o $(IMAGE_OUT)/mkuimage github.com/u-root/mkuimage/cmd/mkuimage
	GOOS=linux GOARCH=$(1) GOAMD64=v1 CGO_ENABLED=0 $(IMAGE_OUT)/mkuimage \
		-build=bb -initcmd=init -uinitcmd= -defaultsh=gosh -go-build-tags=goshsmall -skip-ldd \
		$(if $(2),-files $(2)/lib/modules:lib/modules) \
		$(if $(IMAGE_CONF),-files $(IMAGE_CONF):etc/dpu/agent.conf) $(3) \
		-o $(IMAGE_OUT)/dpu-$(1).cpio \
		$(addprefix github.com/u-root/u-root/cmds/core/,$(IMAGE_UROOT)) $(IMAGE_CMDS)
	gzip -9nf $(IMAGE_OUT)/dpu-$(1).cpio
	@ls -l $(IMAGE_OUT)/dpu-$(1).cpio.gz
endef

image: bpf
	$(call image-build,$(IMAGE_ARCH),$(IMAGE_MODULES))

image-test: bpf
	images/prepare-vmtest.sh $(VMTEST_KERNEL) $(VMTEST_MODULES)
	$(call image-build,arm64,$(VMTEST_KERNEL)/stage)
	$(GO) run ./images/vmtest -kernel $(VMTEST_KERNEL)/vmlinuz -initrd $(IMAGE_OUT)/dpu-arm64.cpio.gz \
		-out $(IMAGE_OUT)/vmtest -timeout $(VMTEST_TIMEOUT) $(VMTEST_ARGS)

rdma-test: bpf
	VMTEST_ARCH=amd64 images/prepare-vmtest.sh $(RDMATEST_KERNEL) $(RDMATEST_MODULES)
	images/prepare-rdma.sh $(RDMATEST_OUT)
	$(call image-build,amd64,$(RDMATEST_KERNEL)/stage,$$(sed 's/^/-files /' $(RDMATEST_OUT)/files))
	$(GO) run ./images/vmtest -arch amd64 -qemu qemu-system-x86_64 -kernel $(RDMATEST_KERNEL)/vmlinuz \
		-initrd $(IMAGE_OUT)/dpu-amd64.cpio.gz -out $(RDMATEST_OUT)/vmtest -timeout $(RDMATEST_TIMEOUT) -run rdma-pair

numa-test: bpf
	VMTEST_ARCH=amd64 images/prepare-vmtest.sh $(NUMATEST_KERNEL) $(NUMATEST_MODULES)
	$(call image-build,amd64,$(NUMATEST_KERNEL)/stage)
	$(GO) run ./images/vmtest -arch amd64 -qemu qemu-system-x86_64 -kernel $(NUMATEST_KERNEL)/vmlinuz \
		-initrd $(IMAGE_OUT)/dpu-amd64.cpio.gz -out $(IMAGE_OUT)/numa -timeout $(NUMATEST_TIMEOUT) -run numa

image-clean:
	rm -rf $(IMAGE_OUT) $(IMAGE_CACHE)
