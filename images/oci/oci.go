package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Media types of the image-spec.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// AnnotationRefName names an image of a layout's index.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// epoch is every layer entry's modification time and the image's creation
// time: the same binaries give the same image.
var epoch = time.Unix(0, 0).UTC()

// File is one regular file of the image.
type File struct {
	Path string      // absolute path in the image, e.g. /usr/local/bin/dpu-agent
	Mode fs.FileMode // permission bits, e.g. 0o755
	Data []byte
}

// Image is what the layer holds and how a runtime starts it.
type Image struct {
	Ref        string   // reference name in the index, e.g. "latest"
	Arch, OS   string   // platform, e.g. amd64, linux
	Files      []File   // regular files
	Dirs       []string // empty directories to create, e.g. /run/dpu
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
}

// Descriptor is an image-spec content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is a descriptor's platform.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest is an image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is a layout's index.json.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Config is an image configuration (the parts this package writes).
type Config struct {
	Created      time.Time     `json:"created"`
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Config       RunConfig     `json:"config"`
	RootFS       RootFS        `json:"rootfs"`
	History      []HistoryItem `json:"history"`
}

// RunConfig is how a container of the image runs.
type RunConfig struct {
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// RootFS lists the layers' uncompressed digests.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// HistoryItem is one step of the image's history.
type HistoryItem struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

// WriteLayout writes img as an OCI image layout in dir (created, and
// emptied of an earlier layout's index and blobs) and returns the
// manifest's descriptor.
func WriteLayout(dir string, img Image) (Descriptor, error) {
	if img.Ref == "" || img.Arch == "" || img.OS == "" || len(img.Entrypoint) == 0 {
		return Descriptor{}, errors.New("oci: an image needs Ref, Arch, OS and Entrypoint")
	}
	layer, diffID, err := buildLayer(img.Files, img.Dirs)
	if err != nil {
		return Descriptor{}, err
	}
	if err := os.RemoveAll(filepath.Join(dir, "blobs")); err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	layerDesc, err := writeBlob(dir, MediaTypeLayer, layer)
	if err != nil {
		return Descriptor{}, err
	}
	cfg := Config{
		Created: epoch, Architecture: img.Arch, OS: img.OS,
		Config:  RunConfig{Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, Labels: img.Labels},
		RootFS:  RootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []HistoryItem{{Created: epoch, CreatedBy: "images/oci: " + strings.Join(paths(img.Files), " ")}},
	}
	cfgDesc, err := writeJSONBlob(dir, MediaTypeConfig, cfg)
	if err != nil {
		return Descriptor{}, err
	}
	man := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: cfgDesc, Layers: []Descriptor{layerDesc}}
	manDesc, err := writeJSONBlob(dir, MediaTypeManifest, man)
	if err != nil {
		return Descriptor{}, err
	}
	manDesc.Annotations = map[string]string{AnnotationRefName: img.Ref}
	manDesc.Platform = &Platform{Architecture: img.Arch, OS: img.OS}
	idx, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{manDesc}})
	if err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	return manDesc, nil
}

// WriteArchive writes the layout in dir as a tar (an oci-archive) to w.
func WriteArchive(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	slices.Sort(files)
	written := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f); d != "." && !written[d]; d = path.Dir(d) {
			written[d] = true
		}
	}
	dirs := make([]string, 0, len(written))
	for d := range written {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return fmt.Errorf("oci: %w", err)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("oci: %w", err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return fmt.Errorf("oci: %w", err)
		}
		if _, err := tw.Write(b); err != nil {
			return fmt.Errorf("oci: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	return nil
}

// buildLayer returns the gzip-compressed layer tar and the digest of the
// uncompressed tar (its diff ID).
func buildLayer(files []File, dirs []string) ([]byte, string, error) {
	all := map[string]bool{} // directories the entries need, parents first
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			all[d] = true
		}
	}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, "", fmt.Errorf("oci: file path %q: want a clean absolute path", f.Path)
		}
		addParents(f.Path)
	}
	for _, d := range dirs {
		if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
			return nil, "", fmt.Errorf("oci: directory %q: want a clean absolute path", d)
		}
		all[d] = true
		addParents(d)
	}
	dirList := make([]string, 0, len(all))
	for d := range all {
		dirList = append(dirList, d)
	}
	slices.Sort(dirList)
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })

	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, "", fmt.Errorf("oci: %w", err)
		}
	}
	for _, f := range sorted {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: int64(f.Mode.Perm()), Size: int64(len(f.Data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, "", fmt.Errorf("oci: %w", err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, "", fmt.Errorf("oci: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("oci: %w", err)
	}
	diff := sha256.Sum256(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, "", fmt.Errorf("oci: %w", err)
	}
	zw.ModTime = epoch
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", fmt.Errorf("oci: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("oci: %w", err)
	}
	return gz.Bytes(), "sha256:" + hex.EncodeToString(diff[:]), nil
}

func writeJSONBlob(dir, mediaType string, v any) (Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	return writeBlob(dir, mediaType, b)
}

func writeBlob(dir, mediaType string, b []byte) (Descriptor, error) {
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", hexSum), b, 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hexSum, Size: int64(len(b))}, nil
}

func paths(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// AgentImage is the dpu-agent image of the static dpu-agent and dpuctl
// binaries in bin: both in /usr/local/bin, the entrypoint dpu-agent with
// its run directory /run/dpu (an empty directory of the image; mount the
// host's there for host programs to reach it), the container's command
// its further arguments (--config /etc/dpu/NODE, as the DaemonSet gives).
func AgentImage(bin, arch, ref string) (Image, error) {
	img := Image{
		Ref: ref, Arch: arch, OS: "linux",
		Dirs:       []string{"/run/dpu", "/etc/dpu", "/tmp"},
		Entrypoint: []string{"/usr/local/bin/dpu-agent", "--run-dir", "/run/dpu"},
		Env:        []string{"PATH=/usr/local/bin", "DPU_RUN_DIR=/run/dpu"},
		Labels:     map[string]string{"org.opencontainers.image.title": "dpu-agent"},
	}
	for _, name := range []string{"dpu-agent", "dpuctl"} {
		b, err := os.ReadFile(filepath.Join(bin, name))
		if err != nil {
			return Image{}, fmt.Errorf("oci: %w", err)
		}
		img.Files = append(img.Files, File{Path: "/usr/local/bin/" + name, Mode: 0o755, Data: b})
	}
	return img, nil
}
