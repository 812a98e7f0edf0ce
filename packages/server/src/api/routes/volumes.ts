import { ConflictError, NotFoundError } from "@aenv/edge/errors";
import { tenantOf } from "@aenv/edge/tenancy";
import { ownerOf, owns } from "@aenv/edge/tenants";
import type { VolumeAndToken, VolumeListed } from "@aenv/protocol";
import { NewVolume, VolumeIdParams } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";
import type { VolumeCatalog, VolumeRecord } from "../../storage/volumes/catalog.js";

export interface VolumeRoutesOptions {
  volumes: VolumeCatalog;
  orch: Orchestrator;
}

const listed = (v: VolumeRecord): VolumeListed => ({ volumeID: v.id, name: v.name });
const withToken = (v: VolumeRecord): VolumeAndToken => ({ ...listed(v), token: v.token });

/** The /volumes control plane (API key): create, list, get (with its content token), destroy. */
export async function volumeRoutes(app: FastifyInstance, o: VolumeRoutesOptions): Promise<void> {
  const { volumes, orch } = o;

  app.post("/volumes", async (req, reply) => {
    const b = NewVolume.parse(req.body ?? {});
    return reply.status(201).send(withToken(await volumes.create(b.name, ownerOf(tenantOf(req)).owner)));
  });

  app.get("/volumes", async (req) => {
    const t = tenantOf(req);
    return volumes
      .list()
      .filter((v) => owns(t, v.owner))
      .map(listed);
  });

  app.get("/volumes/:volumeID", async (req) => {
    const { volumeID } = VolumeIdParams.parse(req.params);
    return withToken(volumes.mustGet(volumeID));
  });

  // A volume a sandbox mounts (running or paused: a resume needs it) is refused with 409
  // rather than pulled from under it; kill those sandboxes first.
  app.delete("/volumes/:volumeID", async (req, reply) => {
    const { volumeID } = VolumeIdParams.parse(req.params);
    if (!volumes.get(volumeID)) throw new NotFoundError(`volume '${volumeID}' not found`);
    const users = orch.volumeUsers(volumeID);
    if (users.length) {
      throw new ConflictError(`volume '${volumeID}' is mounted by sandboxes ${users.join(", ")}; kill them first`);
    }
    await volumes.destroy(volumeID);
    return reply.status(204).send();
  });
}
