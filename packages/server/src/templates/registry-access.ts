import { InvalidRequestError } from "@aenv/edge/errors";
import type { Credentials } from "../storage/images/auth.js";
import { AWS_REGION, ecrCredentials } from "./ecr-token.js";
import type { RegistryAccess } from "./spec.js";

/** Refuses (400), when a build is started, a `fromImageRegistry` this server could not use. */
export function checkRegistryAccess(r: RegistryAccess | undefined): void {
  if (r?.type === "aws" && !AWS_REGION.test(r.awsRegion)) {
    throw new InvalidRequestError(
      `fromImageRegistry.awsRegion: '${r.awsRegion.slice(0, 64)}' is not an AWS region (like us-east-1)`,
    );
  }
}

/**
 * The registry credentials a build's `fromImageRegistry` gives, as Basic credentials for the
 * pull: a registry's username and password as they are; a GCP service account key as Google's
 * registries take it (username `_json_key`, the key's JSON as the password); AWS keys traded
 * for ECR's registry token (ecr-token.ts).
 */
export async function registryCredentials(r: RegistryAccess | undefined): Promise<Credentials | undefined> {
  if (!r) return undefined;
  switch (r.type) {
    case "registry":
      return { username: r.username, password: r.password };
    case "gcp":
      return { username: "_json_key", password: r.serviceAccountJson };
    case "aws":
      checkRegistryAccess(r);
      return ecrCredentials({
        accessKeyId: r.awsAccessKeyId,
        secretAccessKey: r.awsSecretAccessKey,
        region: r.awsRegion,
      });
  }
}
