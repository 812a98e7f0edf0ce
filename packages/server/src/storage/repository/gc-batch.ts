/**
 * Collections of the chunks freed by deleted manifests, batched: each collection reads every
 * lease and every manifest of the repository, so one per delete made a burst of deletes (a
 * dead node's pauses resumed elsewhere, each manifest dropped once it runs) cost the square of
 * the manifests. One collection runs at a time; the deletes arriving meanwhile share the next,
 * and each delete still waits for the collection that covers its chunks.
 */
export class GcBatcher {
  /** The next collection, gathering digests until the one in flight ends. */
  private next: { digests: Set<string>; done: Promise<void> } | undefined;
  private inFlight: Promise<void> = Promise.resolve();

  constructor(private readonly collect: (only: string[]) => Promise<unknown>) {}

  /** Resolves once a collection that considered `digests` ended (best effort: never rejects). */
  free(digests: string[]): Promise<void> {
    if (!this.next) {
      const batch = new Set<string>();
      const done = this.inFlight.then(() => {
        // From here, further deletes gather for the collection after this one.
        this.next = undefined;
        const run = this.collect([...batch]).then(
          () => {},
          () => {},
        );
        this.inFlight = run;
        return run;
      });
      this.next = { digests: batch, done };
    }
    for (const d of digests) this.next.digests.add(d);
    return this.next.done;
  }
}
