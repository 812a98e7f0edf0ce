import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";

/**
 * Where the dashboard suites put their screenshots: a folder under /var/tmp, so that a test run
 * leaves the checkout as it was; AENV_TEST_SCREENSHOTS=docs/dashboard refreshes the ones
 * docs/dashboard.md shows (relative to the checkout).
 */
export function screenshotsDir(root: string): string {
  const want = process.env.AENV_TEST_SCREENSHOTS;
  if (want) return isAbsolute(want) ? want : resolve(root, want);
  return join("/var/tmp", "aenv-dashboard-screenshots");
}

/** Debian's chromium (scripts/install-deps.sh); playwright-core never downloads a browser. */
export const CHROMIUM = process.env.AENV_TEST_CHROMIUM ?? "/usr/bin/chromium";

/**
 * Headless, as root, on a machine with no way out: without the background-networking flags
 * chromium keeps trying Google's hosts and fills the log with refused connections.
 */
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Uncaught exceptions and console errors, in order. */
  errors: string[];
  /** Answers of 400 and above the page got: "STATUS METHOD PATH". */
  failed: string[];
  close(): Promise<void>;
}

/** A fresh profile (its own --user-data-dir) and one page, 1280 px wide. */
export async function openBrowser(): Promise<TestBrowser> {
  const profile = mkdtempSync(join(tmpdir(), "aenv-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 800 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  const failed: string[] = [];
  page.on("response", (r) => {
    if (r.status() >= 400) failed.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
  });
  page.on("pageerror", (err) => errors.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(`console: ${msg.text()}`);
  });
  return {
    context,
    page,
    errors,
    failed,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
