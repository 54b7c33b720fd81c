// Package oci writes a container image of the project's own binaries as an
// OCI image layout (image-spec 1.1: oci-layout, index.json and
// content-addressed blobs) and as an oci-archive (a tar of that layout),
// with no container daemon and no base image: one gzip layer holding the
// files given, a config naming the entrypoint, a manifest, and an index
// entry with the reference name. The layer is reproducible: entries in
// path order, owned by root, with a fixed modification time.
//
// It only writes files; it runs nothing. Loading and running the image is
// for an OCI runtime: images/oci's integration test unpacks it with umoci
// and starts its agent under runc; podman load, skopeo copy and ctr images
// import take the archive.
package oci
