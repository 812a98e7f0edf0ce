import type { Readable } from "node:stream";
import { NotFoundError, UnauthorizedError } from "@aenv/edge/errors";
import { owns, type Tenant } from "@aenv/edge/tenants";
import { VolumeContentQuery, VolumeIdParams, VolumeMetadataBody } from "@aenv/protocol/rest";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { VolumeCatalog, VolumeRecord } from "../../storage/volumes/catalog.js";
import type { VolumeContent } from "../../storage/volumes/content.js";

export interface VolumeContentRoutesOptions {
  volumes: VolumeCatalog;
  content: VolumeContent;
  /** The tenant a request's API key is, if it carries one: the operator reaches any volume, a key its own. */
  tenantOfKey: (req: FastifyRequest) => Promise<Tenant | undefined>;
}

// Public to the API-key hook: these routes check the volume's own token (what the SDK sends,
// E2B_VOLUME_API_URL pointing here) or the API key.
const open = { config: { public: true } };

/** The volume content API the SDK's Volume instances call: /volumecontent/{volumeID}/{dir,path,file}. */
export async function volumeContentRoutes(app: FastifyInstance, o: VolumeContentRoutesOptions): Promise<void> {
  const { volumes, content } = o;

  const authorize = async (req: FastifyRequest): Promise<VolumeRecord> => {
    const { volumeID } = VolumeIdParams.parse(req.params);
    const vol = volumes.get(volumeID);
    if (!vol) throw new NotFoundError(`volume '${volumeID}' not found`);
    const auth = req.headers.authorization;
    const bearer = auth?.startsWith("Bearer ") ? auth.slice(7) : undefined;
    if (bearer && volumes.tokenMatches(vol, bearer)) return vol;
    const t = await o.tenantOfKey(req);
    if (t && owns(t, vol.owner)) return vol;
    if (t) throw new NotFoundError(`volume '${volumeID}' not found`);
    throw new UnauthorizedError("invalid or missing volume token (Authorization: Bearer <token>)");
  };

  app.get("/volumecontent/:volumeID/dir", open, async (req) => {
    const vol = await authorize(req);
    const q = VolumeContentQuery.parse(req.query);
    return content.list(vol.id, q.path, q.depth ?? 1);
  });

  app.post("/volumecontent/:volumeID/dir", open, async (req, reply) => {
    const vol = await authorize(req);
    const q = VolumeContentQuery.parse(req.query);
    return reply.status(201).send(await content.makeDir(vol.id, q.path, q));
  });

  app.get("/volumecontent/:volumeID/path", open, async (req) => {
    const vol = await authorize(req);
    return content.stat(vol.id, VolumeContentQuery.parse(req.query).path);
  });

  app.patch("/volumecontent/:volumeID/path", open, async (req) => {
    const vol = await authorize(req);
    const q = VolumeContentQuery.parse(req.query);
    const b = VolumeMetadataBody.parse(req.body ?? {});
    return content.setMetadata(vol.id, q.path, b);
  });

  app.delete("/volumecontent/:volumeID/path", open, async (req, reply) => {
    const vol = await authorize(req);
    await content.remove(vol.id, VolumeContentQuery.parse(req.query).path);
    return reply.status(204).send();
  });

  app.get("/volumecontent/:volumeID/file", open, async (req, reply) => {
    const vol = await authorize(req);
    const { stream, size } = await content.read(vol.id, VolumeContentQuery.parse(req.query).path);
    return reply.header("content-type", "application/octet-stream").header("content-length", size).send(stream);
  });

  // Uploads stream to disk (never buffered, never over the body limit): any content type.
  await app.register(async (upload) => {
    upload.removeAllContentTypeParsers();
    upload.addContentTypeParser("*", (_req, payload, done) => done(null, payload));
    upload.put("/volumecontent/:volumeID/file", open, async (req, reply) => {
      const vol = await authorize(req);
      const q = VolumeContentQuery.parse(req.query);
      const len = req.headers["content-length"] ? Number(req.headers["content-length"]) : undefined;
      const body = (req.body as Readable | undefined) ?? req.raw;
      try {
        const stat = await content.write(vol.id, q.path, body, {
          ...q,
          ...(len !== undefined && Number.isFinite(len) ? { declaredLength: len } : {}),
        });
        return reply.status(201).send(stat);
      } catch (err) {
        // Refused before the body was read (too large, exists): the client is still sending,
        // so this connection cannot carry another request; say so rather than reset it later.
        if (!body.readableEnded) {
          void reply.header("connection", "close");
          body.resume();
        }
        throw err;
      }
    });
  });
}
