package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sample() Image {
	return Image{
		Ref: "latest", Arch: "amd64", OS: "linux",
		Files:      []File{{Path: "/usr/local/bin/tool", Mode: 0o755, Data: []byte("#!tool\n")}, {Path: "/etc/tool.conf", Mode: 0o644, Data: []byte("a = 1\n")}},
		Dirs:       []string{"/run/tool"},
		Entrypoint: []string{"/usr/local/bin/tool"},
		Env:        []string{"PATH=/usr/local/bin"},
	}
}

// readBlob reads the blob of d from the layout in dir and checks its
// digest and size.
func readBlob(t *testing.T, dir string, d Descriptor) []byte {
	t.Helper()
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexSum))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexSum || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: sha256 %x, %d bytes (descriptor says %d)", d.Digest, sum, len(b), d.Size)
	}
	return b
}

// TestLayout: index → manifest → config and layer, every digest and size
// right, the layer's diff ID that of its uncompressed tar, the files and
// directories in it with their modes; the same image twice is the same
// manifest.
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	desc, err := WriteLayout(dir, sample())
	if err != nil {
		t.Fatal(err)
	}
	var layout struct{ ImageLayoutVersion string }
	if b, err := os.ReadFile(filepath.Join(dir, "oci-layout")); err != nil || json.Unmarshal(b, &layout) != nil || layout.ImageLayoutVersion != "1.0.0" {
		t.Fatalf("oci-layout: %v %+v", err, layout)
	}
	var idx Index
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil || json.Unmarshal(b, &idx) != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != desc.Digest || idx.Manifests[0].Annotations[AnnotationRefName] != "latest" ||
		idx.MediaType != MediaTypeIndex || idx.SchemaVersion != 2 {
		t.Fatalf("index: %+v", idx)
	}
	var man Manifest
	if err := json.Unmarshal(readBlob(t, dir, idx.Manifests[0]), &man); err != nil {
		t.Fatal(err)
	}
	if man.MediaType != MediaTypeManifest || man.Config.MediaType != MediaTypeConfig || len(man.Layers) != 1 || man.Layers[0].MediaType != MediaTypeLayer {
		t.Fatalf("manifest: %+v", man)
	}
	var cfg Config
	if err := json.Unmarshal(readBlob(t, dir, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "amd64" || cfg.OS != "linux" || cfg.Config.Entrypoint[0] != "/usr/local/bin/tool" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Fatalf("config: %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(readBlob(t, dir, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != cfg.RootFS.DiffIDs[0] {
		t.Fatalf("diff ID %s is not the uncompressed layer's", cfg.RootFS.DiffIDs[0])
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + " " + strings.TrimLeft(h.FileInfo().Mode().Perm().String(), "-") + " " + string(body)
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
	}
	want := map[string]string{
		"etc/":               "5 rwxr-xr-x ",
		"etc/tool.conf":      "0 rw-r--r-- a = 1\n",
		"run/":               "5 rwxr-xr-x ",
		"run/tool/":          "5 rwxr-xr-x ",
		"usr/":               "5 rwxr-xr-x ",
		"usr/local/":         "5 rwxr-xr-x ",
		"usr/local/bin/":     "5 rwxr-xr-x ",
		"usr/local/bin/tool": "0 rwxr-xr-x #!tool\n",
	}
	if len(got) != len(want) {
		t.Errorf("layer entries %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("layer entry %s: %q, want %q", k, got[k], v)
		}
	}
	again, err := WriteLayout(t.TempDir(), sample())
	if err != nil || again.Digest != desc.Digest {
		t.Errorf("the same image written again: manifest %s, then %s (%v)", desc.Digest, again.Digest, err)
	}
}

// TestArchive: the oci-archive holds the layout's files.
func TestArchive(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteLayout(dir, sample()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteArchive(&buf, dir); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	for _, n := range []string{"oci-layout", "index.json", "blobs/", "blobs/sha256/"} {
		if !names[n] {
			t.Errorf("archive lacks %s: %v", n, names)
		}
	}
}

// TestBadImages: what a runtime could not use is refused.
func TestBadImages(t *testing.T) {
	for _, mod := range []func(*Image){
		func(i *Image) { i.Entrypoint = nil },
		func(i *Image) { i.Files[0].Path = "usr/bin/tool" },
		func(i *Image) { i.Files[0].Path = "/usr/../bin/tool" },
		func(i *Image) { i.Dirs = []string{"/"} },
	} {
		img := sample()
		mod(&img)
		if _, err := WriteLayout(t.TempDir(), img); err == nil {
			t.Errorf("%+v accepted", img)
		}
	}
}
