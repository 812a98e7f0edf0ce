import type { RecordStore } from "@aenv/edge/record-store";
import type { SecretSealer } from "./sealing.js";
import type { SecretRecord } from "./store.js";

/** A secret as a cluster stores it: everything but the value in the clear, the value sealed. */
export type SealedSecretRecord = Omit<SecretRecord, "value"> & { sealedValue: string };

/**
 * A cluster's secrets (Redis), each value sealed by `sealer` on the way in and opened on the
 * way out. A record that does not open (another cluster's key, altered, moved to another ID)
 * is left out and reported once: it is never sent anywhere.
 */
export class SealedSecretRecords implements RecordStore<SecretRecord> {
  private readonly reported = new Set<string>();

  constructor(
    /** A cluster's store, whose version tells when to read it again. */
    private readonly inner: RecordStore<SealedSecretRecord> &
      Required<Pick<RecordStore<SealedSecretRecord>, "version">>,
    private readonly sealer: SecretSealer,
    private readonly onUnopenable: (id: string, err: Error) => void,
  ) {}

  private opened(r: SealedSecretRecord): SecretRecord | undefined {
    const { sealedValue, ...rest } = r;
    try {
      return { ...rest, value: this.sealer.open(r.id, sealedValue) };
    } catch (err) {
      if (!this.reported.has(r.id)) {
        this.reported.add(r.id);
        this.onUnopenable(r.id, err as Error);
      }
      return undefined;
    }
  }

  async list(): Promise<SecretRecord[]> {
    return (await this.inner.list()).flatMap((r) => this.opened(r) ?? []);
  }

  async get(id: string): Promise<SecretRecord | undefined> {
    const r = await this.inner.get(id);
    return r ? this.opened(r) : undefined;
  }

  async put(r: SecretRecord): Promise<void> {
    const { value, ...rest } = r;
    await this.inner.put({ ...rest, sealedValue: this.sealer.seal(r.id, value) });
  }

  delete(id: string): Promise<boolean> {
    return this.inner.delete(id);
  }

  version(): Promise<string> {
    return this.inner.version();
  }
}
