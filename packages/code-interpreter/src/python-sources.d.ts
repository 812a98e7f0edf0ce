/** Python sources the service sends to its kernels, bundled as text (build.mjs: esbuild's text loader). */
declare module "*.py" {
  const source: string;
  export default source;
}
