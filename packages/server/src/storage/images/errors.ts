/** One error type for everything that can go wrong turning a reference into a rootfs. */
export type ImageErrorCode =
  | "bad-reference"
  | "manifest-unknown"
  | "unauthorized"
  | "registry"
  | "network"
  | "forbidden-address"
  | "unsupported"
  | "no-platform"
  | "digest-mismatch"
  | "blob-missing"
  | "unsafe-layer"
  | "bad-layer"
  | "archive"
  | "destination-exists"
  | "too-large"
  | "timeout";

export class ImagePullError extends Error {
  constructor(
    readonly code: ImageErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A layer entry that would write outside the rootfs (or through a link that leaves it). */
export class UnsafeLayerError extends ImagePullError {
  constructor(
    readonly entry: string,
    reason: string,
  ) {
    super("unsafe-layer", `layer escapes the rootfs: ${JSON.stringify(entry)} ${reason}`);
  }
}
