/** Public surface of the OCI image library (see docs/images.md). */
export { BlobStore } from "./blob-store.js";
export { ContentStore, type FileMeta, metaOfKey, onDisk } from "./content-store.js";
export { type ImageErrorCode, ImagePullError, UnsafeLayerError } from "./errors.js";
export { modtimeOf, type TocEntry } from "./estargz.js";
export {
  ImageStore,
  type ImageStoreOptions,
  type LayerDescriptor,
  type LayerRanges,
  type PeerBlobs,
  type PulledImage,
  type SeekableImage,
  type SeekableLayer,
  type UnpackResult,
} from "./image-store.js";
export { formatPlatform, hostPlatform, type ImageConfig, type Platform } from "./manifest.js";
export type { LayerProgress, LayerState, Progress, ProgressCallback } from "./progress.js";
export {
  formatReference,
  type ImageReference,
  type ImageSourceSpec,
  isHostPathSource,
  parseReference,
  parseSource,
} from "./reference.js";
export type { DiskBudget, UnpackContent, UnpackStats } from "./unpack.js";
