// A stand-in for ECR's GetAuthorizationToken on loopback (ECR itself is not reachable from
// here). It checks each request's SigV4 signature against the one key pair it knows, as AWS
// would, and answers a registry token for the user and password it was given; the pull that
// follows goes to a real registry behind an auth proxy that wants those.
import { createHash, createHmac } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

export interface EcrStandIn {
  url: string;
  /** Tokens given, and requests refused (a bad signature or an unknown key). */
  readonly issued: number;
  readonly refused: number;
  close(): Promise<void>;
}

const hmac = (key: string | Buffer, data: string) => createHmac("sha256", key).update(data).digest();
const sha256 = (data: string | Buffer) => createHash("sha256").update(data).digest("hex");

/** Whether `req` (with `body`) carries a valid SigV4 signature of `secret` for key `keyId` and service ecr. */
function signedBy(req: IncomingMessage, body: Buffer, keyId: string, secret: string): boolean {
  const auth = /^AWS4-HMAC-SHA256 Credential=([^,]+), ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(
    req.headers.authorization ?? "",
  );
  if (!auth) return false;
  const [, credential, signedHeaders, signature] = auth as unknown as [string, string, string, string];
  const [id, date, region, service, term] = credential.split("/");
  const amzDate = String(req.headers["x-amz-date"] ?? "");
  if (id !== keyId || service !== "ecr" || term !== "aws4_request" || !date || !region) return false;
  if (!amzDate.startsWith(date)) return false;
  const url = new URL(req.url ?? "/", "http://x");
  const headers = signedHeaders
    .split(";")
    .map((h) => `${h}:${String(req.headers[h] ?? "").trim()}\n`)
    .join("");
  const canonical = [req.method, url.pathname, url.search.slice(1), headers, signedHeaders, sha256(body)].join("\n");
  const scope = `${date}/${region}/ecr/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256(canonical)].join("\n");
  const key = hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), "ecr"), "aws4_request");
  return hmac(key, toSign).toString("hex") === signature;
}

export async function startEcrStandIn(
  keys: { accessKeyId: string; secretAccessKey: string },
  registry: { username: string; password: string },
): Promise<EcrStandIn> {
  const state = { issued: 0, refused: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const target = req.headers["x-amz-target"];
      if (target !== "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken") {
        res.writeHead(400, { "content-type": "application/x-amz-json-1.1" });
        res.end(JSON.stringify({ __type: "UnknownOperationException" }));
        return;
      }
      if (!signedBy(req, body, keys.accessKeyId, keys.secretAccessKey)) {
        state.refused++;
        res.writeHead(403, { "content-type": "application/x-amz-json-1.1" });
        res.end(JSON.stringify({ __type: "UnrecognizedClientException", message: "The security token is invalid." }));
        return;
      }
      state.issued++;
      const token = Buffer.from(`${registry.username}:${registry.password}`).toString("base64");
      res.writeHead(200, { "content-type": "application/x-amz-json-1.1" });
      res.end(
        JSON.stringify({
          authorizationData: [
            { authorizationToken: token, expiresAt: Date.now() / 1000 + 43_200, proxyEndpoint: "https://x" },
          ],
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get issued() {
      return state.issued;
    },
    get refused() {
      return state.refused;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
