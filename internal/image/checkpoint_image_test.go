package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containers/image/v5/manifest"
	"github.com/containers/storage"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Review 2026-12-06, R5: an image is a checkpoint image only under the references it was
// pulled by from an annotated manifest. A tenant's pull of a public image's config and
// layers (the same ID) under an annotated manifest of its own registry makes the image a
// checkpoint under the tenant's reference alone, across a restart; an ID alone is never
// one; a later pull of the tenant's tag from a plain manifest takes it back; the record
// goes with the image.
func TestCheckpointImageIsPerReference(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the store mounts")
	}
	dir := t.TempDir()
	opts := Options{StateRoot: filepath.Join(dir, "state"), RunRoot: filepath.Join(dir, "run"), Config: config.Image{StorageDriver: "overlay", MaxParallelDownloads: 1}}
	open := func() *Service {
		t.Helper()
		s, err := New(opts)
		if err != nil {
			t.Skipf("no overlay image store here: %v", err)
		}
		return s
	}
	s := open()
	defer func() { s.Close() }()

	id := testImage(t, s, "kube-proxy")
	imageID := "sha256:" + id
	const cfg = `"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` // the same config, so the same ID
	plain := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` + cfg + id + `","size":1},"layers":[]}`)
	annotated := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` + cfg + id + `","size":1},"layers":[],` +
		`"annotations":{"io.kubernetes.cri-o.annotations.checkpoint.name":"counter"}}`)
	annotatedDigest, err := manifest.Digest(annotated)
	if err != nil {
		t.Fatal(err)
	}
	pull := func(ref string, m []byte) {
		t.Helper()
		named, err := normalize(ref)
		if err != nil {
			t.Fatal(err)
		}
		// What containers/image leaves: the ID's "manifest" item is the last pull's.
		if err := s.store.SetImageBigData(id, storage.ImageDigestBigDataKey, m, manifest.Digest); err != nil {
			t.Fatal(err)
		}
		if err := s.recordPull(id, named, m); err != nil {
			t.Fatal(err)
		}
	}
	want := func(when, ref, name string) {
		t.Helper()
		got, err := s.CheckpointName(imageID, ref)
		if err != nil || got != name {
			t.Errorf("%s: CheckpointName(%s, %q) = %q, %v; want %q", when, id[:12], ref, got, err, name)
		}
	}

	pull("kube-proxy:1", plain)
	if _, err := s.store.ImageBigData(id, checkpointRefsKey); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a plain pull wrote a checkpoint record (%v)", err)
	}
	want("before the tenant's pull", "kube-proxy:1", "")

	pull("127.0.0.1:5000/tenant/x:1", annotated) // the tenant's: last, so its manifest is the ID's
	tenantByDigest := "127.0.0.1:5000/tenant/x@" + annotatedDigest.String()
	check := func(when string) {
		t.Helper()
		want(when, "kube-proxy:1", "")
		want(when, "docker.io/library/kube-proxy:1", "")
		want(when, imageID, "") // kubelet's image.image when it sends no reference
		want(when, id, "")
		want(when, id[:12], "")
		want(when, "", "")
		want(when, "127.0.0.1:5000/tenant/x:1", "counter")
		want(when, tenantByDigest, "counter")
	}
	check("after the tenant's pull")
	s.Close()
	s = open()
	check("after a restart")

	pull("127.0.0.1:5000/tenant/x:1", plain) // the tag, now from a plain manifest
	want("after a plain pull of the tenant's tag", "127.0.0.1:5000/tenant/x:1", "")
	want("after a plain pull of the tenant's tag", tenantByDigest, "counter") // those bytes are still annotated
	s.Close()
	s = open()
	want("after a plain pull of the tenant's tag and a restart", "127.0.0.1:5000/tenant/x:1", "")
	want("after a plain pull of the tenant's tag and a restart", tenantByDigest, "counter")
	want("after a plain pull of the tenant's tag and a restart", "kube-proxy:1", "")

	// Forgotten with the image: a later image of the same ID has no record of it.
	if err := s.Remove(imageID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckpointName(imageID, tenantByDigest); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("removed image: CheckpointName: %v, want ErrNotFound", err)
	}
	if again := testImage(t, s, "kube-proxy"); again != id {
		t.Fatalf("the same config made ID %s, not %s", again, id)
	}
	want("after the image's removal and a plain pull", tenantByDigest, "")
}
