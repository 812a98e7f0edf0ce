import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

// Served by aenv-server and aenv-gateway under /dashboard/ (the page itself at /).
export default defineConfig({
  base: "/dashboard/",
  // @aenv/protocol's entry also holds the server-side /files signer (node:crypto), unused here.
  resolve: { alias: { "node:crypto": fileURLToPath(new URL("src/node-crypto-stub.ts", import.meta.url)) } },
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 1000 },
});
