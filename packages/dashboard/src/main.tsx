import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { forgetKey, setUnauthorizedHandler, storedKey } from "./api.js";
import { KeysPage } from "./pages/keys.js";
import { NodesPage, SnapshotsPage, VolumesPage } from "./pages/resources.js";
import { SandboxPage } from "./pages/sandbox.js";
import { SandboxesPage } from "./pages/sandboxes.js";
import { TemplatesPage } from "./pages/templates.js";
import { SignIn } from "./signin.js";

/** Hash routes (#/sandboxes/ID): the server serves one page, whatever the view. */
function useRoute(): string[] {
  const parse = () =>
    location.hash
      .replace(/^#\/?/, "")
      .split("/")
      .filter(Boolean)
      .map((p) => decodeURIComponent(p));
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const on = () => setRoute(parse());
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}

const NAV: Array<[string, string]> = [
  ["sandboxes", "Sandboxes"],
  ["templates", "Templates"],
  ["snapshots", "Snapshots"],
  ["volumes", "Volumes"],
  ["nodes", "Nodes"],
  ["keys", "API keys"],
];

function Page({ route }: { route: string[] }) {
  const [section = "sandboxes", id] = route;
  if (section === "sandboxes" && id) return <SandboxPage id={id} />;
  if (section === "templates") return <TemplatesPage />;
  if (section === "snapshots") return <SnapshotsPage />;
  if (section === "volumes") return <VolumesPage />;
  if (section === "nodes") return <NodesPage />;
  if (section === "keys") return <KeysPage />;
  return <SandboxesPage />;
}

function App() {
  const [signedIn, setSignedIn] = useState(() => !!storedKey());
  const route = useRoute();
  useEffect(() => setUnauthorizedHandler(() => setSignedIn(false)), []);
  if (!signedIn) return <SignIn onSignedIn={() => setSignedIn(true)} />;
  const section = route[0] ?? "sandboxes";
  return (
    <div class="shell">
      <header class="top">
        <span class="brand">aenv</span>
        <nav aria-label="Main">
          {NAV.map(([path, label]) => (
            <a key={path} href={`#/${path}`} aria-current={section === path ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <button
          type="button"
          class="quiet"
          onClick={() => {
            forgetKey();
            setSignedIn(false);
          }}
        >
          Sign out
        </button>
      </header>
      <main>
        <Page route={route} />
      </main>
    </div>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
