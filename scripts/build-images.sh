#!/usr/bin/env bash
# Builds Pitcrew's two images with no container daemon and nothing pulled from a
# registry, and writes each as an OCI archive with a CycloneDX SBOM beside it:
#
#   dist/pitcrew-VERSION.oci.tar         dist/pitcrew-VERSION.cdx.json        operator and agent
#   dist/pitcrew-probe-VERSION.oci.tar   dist/pitcrew-probe-VERSION.cdx.json  validation probes
#
# 1. The base: mmdebstrap makes a Debian bookworm root filesystem with Python 3.11
#    from Debian's packages, and podman makes it the image localhost/pitcrew-base:bookworm.
#    Its tar is kept in the store and used again while its inputs are unchanged.
# 2. podman builds the Dockerfile's two targets on that base (PYTHON_IMAGE) with chroot
#    isolation (no OCI runtime, no daemon), in a store of its own. pip downloads from
#    PyPI as usual.
# 3. podman saves each image as an OCI archive, and image-sbom.py reads the image's files.
#
# Reproducible: every time stamp in the base, the images and the SBOMs is
# SOURCE_DATE_EPOCH, a constant by default rather than the time of the build or of a
# commit, so the same inputs give the same image digests whatever the layer cache
# holds. The inputs that float are Debian's mirrors and the newest versions on PyPI.
#
# Settings, from the environment:
#   PITCREW_IMAGES_STORE  podman's storage and the base's tar (default ~/.cache/pitcrew/images)
#   PITCREW_IMAGES_STORAGE_DRIVER  overlay (default), or vfs where overlay mounts are
#                         refused, as in an unprivileged CI container. vfs copies the whole
#                         file system at every Dockerfile step: over 50 GB for the probe
#                         image's steps, so build only the other one there (IMAGES=pitcrew)
#   IMAGES                the images to build: "pitcrew probe" (default), or one of them
#   DEBIAN_MIRROR         the base's Debian mirrors (default http://deb.debian.org/debian and
#   DEBIAN_SECURITY_MIRROR  .../debian-security); snapshot.debian.org URLs pin the packages
#   TORCH_INDEX_URL       the probe's torch: empty for PyPI's CUDA build (default),
#   TORCH_VERSION         https://download.pytorch.org/whl/cpu for a CPU-only one
#   BUILD_CA_BUNDLE       a CA bundle lent to pip during the build, never copied into an
#                         image (default: the host's, so a TLS-intercepting proxy works)
set -euo pipefail
cd "$(dirname "$0")/.."

STORE=${PITCREW_IMAGES_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/pitcrew/images}
IMAGES=${IMAGES:-pitcrew probe}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# 2025-05-20 00:00 UTC: any fixed time will do.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1747699200}
BUILD_CA_BUNDLE=${BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
BASE_IMAGE=localhost/pitcrew-base:bookworm
BASE_PACKAGES=python3,python3-venv,ca-certificates
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

DRIVER=${PITCREW_IMAGES_STORAGE_DRIVER:-overlay}
podman() { command podman --root "$STORE/$DRIVER" --runroot "$STORE/run-$DRIVER" --storage-driver "$DRIVER" "$@"; }
step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

mkdir -p "$STORE/base" dist

# --- 1. the base ------------------------------------------------------------------
# The security and updates suites too: the base is what runs in production.
sources=(
  "deb $DEBIAN_MIRROR bookworm main"
  "deb $DEBIAN_MIRROR bookworm-updates main"
  "deb $DEBIAN_SECURITY_MIRROR bookworm-security main"
)
base_key=$(printf '%s\n' "$BASE_PACKAGES" "$SOURCE_DATE_EPOCH" "${sources[@]}" | sha256sum | cut -c1-16)
base_tar=$STORE/base/bookworm-$base_key.tar
if [ ! -f "$base_tar" ]; then
  step "base: mmdebstrap bookworm ($BASE_PACKAGES)"
  rm -rf "$base_tar.part"
  # minbase: apt too, as in Debian's own images, for a Dockerfile stage to add packages.
  # merged /usr as debootstrap makes it, without the usrmerge package and the perl it
  # brings. No documentation but the copyright files; dpkg keeps these rules for later.
  mmdebstrap --quiet --format=tar --variant=minbase --include="$BASE_PACKAGES" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$base_tar.part" "${sources[@]}"
  mv "$base_tar.part" "$base_tar"
fi
if [ "$(podman image inspect --format '{{index .Labels "dev.pitcrew.base"}}' "$BASE_IMAGE" 2>/dev/null)" != "$base_key" ]; then
  step "base: $BASE_IMAGE from $(basename "$base_tar")"
  context=$(mktemp -d)
  ln "$base_tar" "$context/rootfs.tar" 2>/dev/null || cp "$base_tar" "$context/rootfs.tar"
  cat >"$context/Containerfile" <<EOF
FROM scratch
ADD rootfs.tar /
ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL dev.pitcrew.base=$base_key
CMD ["python3"]
EOF
  podman build --quiet --isolation chroot --pull=never --network host \
    --timestamp "$SOURCE_DATE_EPOCH" -t "$BASE_IMAGE" "$context" >/dev/null
  rm -rf "$context"
fi

# --- 2. the images ----------------------------------------------------------------
build_args=(
  --isolation chroot --pull=never --network host --layers
  --timestamp "$SOURCE_DATE_EPOCH"
  --build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
  --build-arg "PYTHON_IMAGE=$BASE_IMAGE"
  --build-arg "TORCH_INDEX_URL=${TORCH_INDEX_URL:-}"
  --build-arg "TORCH_VERSION=${TORCH_VERSION:-}"
)
if [ -n "$BUILD_CA_BUNDLE" ] && [ -s "$BUILD_CA_BUNDLE" ]; then
  build_args+=(-v "$(realpath "$BUILD_CA_BUNDLE"):/etc/ssl/certs/ca-certificates.crt:ro")
fi

# The build stage, tagged so that pruning below keeps it: it is the layer cache of
# both images (the dependencies' wheels, downloaded once per pyproject.toml).
step "localhost/pitcrew-build:cache: podman build --target build"
podman build "${build_args[@]}" --target build -t localhost/pitcrew-build:cache -f Dockerfile .

# The digest a registry will show for an archive pushed as it is.
manifest_digest() { tar -xOf "$1" index.json | python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])'; }
# What an archive and its SBOM were written from: the image's ID, their sizes and times.
stamp() { echo "$(podman image inspect --format '{{.Id}}' "$1") $(stat -c %s.%Y "$2" "$3" 2>/dev/null | tr '\n' ' ')"; }

for target in $IMAGES; do
  case $target in
    pitcrew) name=pitcrew ;;
    probe) name=pitcrew-probe ;;
    *) echo "scripts/build-images.sh: unknown image '$target' (pitcrew, probe)" >&2; exit 2 ;;
  esac
  image=localhost/$name:$VERSION
  archive=dist/$name-$VERSION.oci.tar
  sbom=dist/$name-$VERSION.cdx.json
  saved=$STORE/saved/$name-$VERSION
  step "$image: podman build --target $target"
  podman build "${build_args[@]}" --target "$target" -t "$image" -f Dockerfile .

  # Saving compresses every layer again (minutes for the probe): skipped while the
  # archive and the SBOM are the ones written from this very image.
  if [ "$(cat "$saved" 2>/dev/null)" != "$(stamp "$image" "$archive" "$sbom")" ]; then
    step "$image: $archive"
    rm -f "$archive" "$sbom"
    podman save --quiet --format oci-archive -o "$archive" "$image"

    step "$image: SBOM"
    root=$(podman image mount "$image")
    python3 scripts/image-sbom.py --root "$root" --name "$name" --version "$VERSION" \
      --digest "$(manifest_digest "$archive")" --output "$sbom"
    podman image unmount "$image" >/dev/null
    mkdir -p "$STORE/saved"
    stamp "$image" "$archive" "$sbom" >"$saved"
  fi
  printf '%s\t%s\t%s\n' "$archive" "$(manifest_digest "$archive")" "$(du -h "$archive" | cut -f1)"
done

# Images of earlier builds, untagged now.
podman image prune --force >/dev/null
step "done"
podman images --filter reference='localhost/pitcrew*'
