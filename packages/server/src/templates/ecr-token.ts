import { ECRClient, GetAuthorizationTokenCommand } from "@aws-sdk/client-ecr";
import type { Credentials } from "../storage/images/auth.js";

/** An AWS region's form (`us-east-1`, `eu-central-2`, `us-gov-west-1`): it becomes part of a host name. */
export const AWS_REGION = /^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$/;

/** How long the ECR call may take; a build waits for it before its pull. */
const ECR_TIMEOUT_MS = 15_000;

/** Why ECR gave no token: its error's name and message (they carry no credential). */
export class EcrTokenError extends Error {}

/**
 * Basic credentials for an ECR registry, from AWS keys: ECR's GetAuthorizationToken, SigV4-signed
 * with them, answers `base64(AWS:<password>)`, valid 12 hours. The keys are used for this one
 * call and kept nowhere. The endpoint is ECR's for `region` (aws-sdk's, which also honours the
 * server's `AWS_ENDPOINT_URL_ECR`: a VPC endpoint, or a stand-in in tests); the caller checked
 * the region's form, so it cannot name another host.
 */
export async function ecrCredentials(keys: {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
}): Promise<Credentials> {
  const client = new ECRClient({
    region: keys.region,
    credentials: { accessKeyId: keys.accessKeyId, secretAccessKey: keys.secretAccessKey },
    maxAttempts: 2,
    requestHandler: { requestTimeout: ECR_TIMEOUT_MS, connectionTimeout: ECR_TIMEOUT_MS },
  });
  try {
    const out = await client.send(new GetAuthorizationTokenCommand({})).catch((err: Error) => {
      throw new EcrTokenError(`ECR gave no registry token: ${err.name}: ${err.message}`.slice(0, 500));
    });
    const token = out.authorizationData?.[0]?.authorizationToken;
    const decoded = token ? Buffer.from(token, "base64").toString("utf8") : "";
    const colon = decoded.indexOf(":");
    if (colon <= 0 || colon === decoded.length - 1) {
      throw new EcrTokenError("ECR's answer held no registry token of the form user:password");
    }
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  } finally {
    client.destroy();
  }
}
