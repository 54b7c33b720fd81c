// Command ociimage writes the dpu-agent container image (package
// images/oci) from binaries already built: an OCI image layout and, with
// --archive, an oci-archive of it. make image-oci runs it.
//
//	ociimage --bin DIR --layout DIR [--archive FILE] [--arch A] [--ref R]
//
// DIR (--bin) holds static dpu-agent and dpuctl binaries for the image's
// architecture; they go to /usr/local/bin. The entrypoint is
// /usr/local/bin/dpu-agent with the run directory /run/dpu (an empty
// directory of the image) and its arguments from the container's command.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aitherion/dpu/images/oci"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	bin := fs.String("bin", "", "`directory` of the static dpu-agent and dpuctl to put in the image")
	layout := fs.String("layout", "", "OCI image layout `directory` to write")
	archive := fs.String("archive", "", "also write the layout as an oci-archive `file` (tar)")
	arch := fs.String("arch", "amd64", "the binaries' `architecture`")
	ref := fs.String("ref", "latest", "the image's reference `name` in the layout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *layout == "" || fs.NArg() > 0 {
		return errors.New("usage: ociimage --bin DIR --layout DIR [--archive FILE] [--arch A] [--ref R]")
	}
	img, err := oci.AgentImage(*bin, *arch, *ref)
	if err != nil {
		return err
	}
	desc, err := oci.WriteLayout(*layout, img)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: dpu-agent image %s:%s (%s), manifest %s\n", *layout, *layout, *ref, *arch, desc.Digest)
	if *archive != "" {
		f, err := os.Create(*archive)
		if err != nil {
			return err
		}
		if err := oci.WriteArchive(f, *layout); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: the same as an oci-archive (podman load -i, skopeo copy oci-archive:…)\n", *archive)
	}
	return nil
}
