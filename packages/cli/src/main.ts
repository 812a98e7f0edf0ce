import { run } from "./program.js";

const code = await run(process.argv.slice(2));
process.exit(code);
