/**
 * Where a volume's files live. The local backend is a folder on this node; a shared backend
 * (the snapshot repository's filesystem, NFS) can implement the same seam later, as long as it
 * yields a host folder runsc can bind-mount.
 */
export interface VolumeBackend {
  readonly name: string;
  /** Makes an empty volume (idempotent). */
  create(id: string): Promise<void>;
  /** The host folder bind-mounted read-write into sandboxes and served by the content API. */
  root(id: string): string;
  /** Bytes that may still be written before the volume's size limit (what uploads are checked against). */
  free(id: string): Promise<number>;
  /** Deletes its files. */
  remove(id: string): Promise<void>;
  /** Makes an existing volume usable after a start (mounts it, where the backend mounts). */
  attach(id: string): Promise<void>;
  /** Releases what attach() took (at a graceful stop, after the sandboxes are gone). */
  detach(id: string): Promise<void>;
}
