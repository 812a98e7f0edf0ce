import { open } from "node:fs/promises";
import { NotFoundError } from "@aenv/edge/errors";
import { errorBodyOf } from "@aenv/edge/http-errors";
import { ImageLayersQuery } from "@aenv/protocol/rest";
import type { FastifyInstance, FastifyReply } from "fastify";
import { SANDBOX_ID_RE } from "../../state/ids.js";
import type { OnDemandImages } from "../../templates/on-demand.js";

/** Where this node keeps what it serves its peers; undefined when it does not hold it. */
export interface PeerFiles {
  blob(digest: string): string | undefined;
  treeIndex(imageDigest: string): string | undefined;
  content(key: string): string | undefined;
  /** A snapshot chunk's bytes this node has (its cache, a local image), by its sha256. */
  chunk(sha256: string): Promise<Buffer | undefined>;
  /** The sealed manifest of a sandbox paused here whose commit has not finished. */
  pause(sandboxId: string): Promise<Buffer | undefined>;
}

const SHA256 = /^[a-f0-9]{64}$/;

async function sendFile(reply: FastifyReply, file: string | undefined) {
  const fh = file ? await open(file, "r").catch(() => undefined) : undefined;
  if (!fh) return reply.status(404).send(errorBodyOf(404, "not held here"));
  const { size } = await fh.stat();
  return reply
    .header("content-type", "application/octet-stream")
    .header("content-length", String(size))
    .send(fh.createReadStream());
}

function sendHeld(reply: FastifyReply, data: Buffer | undefined, type: string) {
  if (!data) return reply.status(404).send(errorBodyOf(404, "not held here"));
  return reply.header("content-type", type).send(data);
}

/**
 * What the cluster's nodes fetch from each other (cluster.p2p), behind the API key like the
 * rest of the node API: layer blobs by digest, an image tree's index by image digest, file
 * content by content key, snapshot chunks by sha256, a paused sandbox's manifest by its ID. Names are checked here; the fetching node
 * verifies every byte.
 */
export async function peerRoutes(
  app: FastifyInstance,
  o: { files: PeerFiles; onDemand: OnDemandImages },
): Promise<void> {
  const { files, onDemand } = o;
  /**
   * A gateway's question before it places the first start of an image no node holds: the
   * image's layers, so it can prefer the node that holds most of their bytes. Only for what a
   * create could start (an on-demand reference, or any image with `cold`, as /sandboxes-cold).
   */
  app.get("/cluster/image-layers", async (req) => {
    const q = ImageLayersQuery.parse(req.query);
    if (!q.cold && !onDemand.resolves(q.ref)) {
      throw new NotFoundError(`'${q.ref}' is not an image this node starts on demand`);
    }
    return onDemand.layers(q.ref);
  });
  app.get("/cluster/blobs/sha256/:hex", async (req, reply) => {
    const { hex } = req.params as { hex: string };
    if (!SHA256.test(hex)) return reply.status(400).send(errorBodyOf(400, "not a sha256 digest"));
    return sendFile(reply, files.blob(`sha256:${hex}`));
  });
  app.get("/cluster/images/:digest/index", async (req, reply) => {
    const { digest } = req.params as { digest: string };
    const hex = digest.startsWith("sha256:") ? digest.slice(7) : "";
    if (!SHA256.test(hex)) return reply.status(400).send(errorBodyOf(400, "not a sha256 digest"));
    return sendFile(reply, files.treeIndex(`sha256:${hex}`));
  });
  app.get("/cluster/chunks/:hex", async (req, reply) => {
    const { hex } = req.params as { hex: string };
    if (!SHA256.test(hex)) return reply.status(400).send(errorBodyOf(400, "not a sha256 digest"));
    return sendHeld(reply, await files.chunk(hex), "application/octet-stream");
  });
  app.get("/cluster/pauses/:id", async (req, reply) => {
    const { id } = req.params as { id: string };
    if (!SANDBOX_ID_RE.test(id)) return reply.status(400).send(errorBodyOf(400, "not a sandbox ID"));
    return sendHeld(reply, await files.pause(id), "application/json");
  });
  app.get("/cluster/content/:key", async (req, reply) => {
    const { key } = req.params as { key: string };
    return sendFile(reply, files.content(key));
  });
}
