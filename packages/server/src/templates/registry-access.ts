import { InvalidRequestError } from "@aenv/edge/errors";
import type { Credentials } from "../storage/images/auth.js";
import type { RegistryAccess } from "./spec.js";

/**
 * The registry credentials a build's `fromImageRegistry` gives, as Basic credentials for the
 * pull: a registry's username and password as they are; a GCP service account key as Google's
 * registries take it (username `_json_key`, the key's JSON as the password). AWS needs a token
 * from ECR's API (SigV4-signed), which this server does not call: refused with how to get one.
 */
export function registryCredentials(r: RegistryAccess | undefined): Credentials | undefined {
  if (!r) return undefined;
  switch (r.type) {
    case "registry":
      return { username: r.username, password: r.password };
    case "gcp":
      return { username: "_json_key", password: r.serviceAccountJson };
    case "aws":
      throw new InvalidRequestError(
        "fromImageRegistry type aws is not supported: this server does not call AWS's API for an ECR token; " +
          "pass type registry with username AWS and the password `aws ecr get-login-password` prints",
      );
  }
}
