import { envdRequest } from "./envd-client.js";

const CERT_FILE = "/usr/local/share/ca-certificates/aenv-egress.crt";
const BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

const files = (path: string) => `/files?path=${encodeURIComponent(path)}&username=root`;

/**
 * Makes a sandbox trust the node's egress CA (needed once its network rules transform HTTPS
 * requests): the certificate as its own file and appended to the system bundle, which curl,
 * OpenSSL, Python's ssl and most runtimes read. Idempotent. Goes through envd's file API as
 * root, like a user's upload would.
 */
export async function trustEgressCa(ip: string, token: string, pem: string): Promise<void> {
  const put = async (path: string, bytes: string) => {
    const r = await envdRequest(ip, "POST", files(path), { bytes, token, timeoutMs: 10_000 });
    if (r.status >= 300) throw new Error(`writing ${path} in the sandbox: envd answered ${r.status}: ${r.body}`);
  };
  await put(CERT_FILE, pem);
  const cur = await envdRequest(ip, "GET", files(BUNDLE), { token, timeoutMs: 10_000 });
  const bundle = cur.status === 200 ? cur.body : "";
  if (!bundle.includes(pem.trim())) await put(BUNDLE, `${bundle.replace(/\n*$/, "\n")}${pem}`);
}
