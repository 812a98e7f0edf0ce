import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { locateStepError } from "../src/build-run.js";
import { formatBytes, LayerBoard, parseLayerLine, renderBar } from "../src/progress/layers.js";

describe("layer progress lines", () => {
  test("pull and unpack lines parse; anything else does not", () => {
    assert.deepEqual(parseLayerLine("pull layer 0123456789ab downloading 512/2048"), {
      phase: "pull",
      digest: "0123456789ab",
      state: "downloading",
      bytes: 512,
      size: 2048,
    });
    assert.equal(parseLayerLine("unpack layer abcdefabcdef extracted 10/10")?.state, "extracted");
    for (const bad of [
      "Step 1: RUN echo",
      "pull layer 0123456789ab flying 1/2",
      "pull layer 0123456789 done 1/2",
      "pull layer 0123456789ab done 1",
      "echo pull layer 0123456789ab done 1/2",
    ])
      assert.equal(parseLayerLine(bad), undefined, bad);
  });

  test("bars: proportional while moving, full when cached or done", () => {
    const l = parseLayerLine("pull layer 0123456789ab downloading 500/1000");
    assert.ok(l);
    assert.equal(renderBar(l, 10), "0123456789ab pull downloading   [====>     ] 500B/1.0KB");
    assert.match(renderBar({ ...l, state: "cached", bytes: 0 }, 10), /\[==========\] cached$/);
    assert.match(renderBar({ ...l, state: "waiting", bytes: 0 }, 10), /\[ {10}\] 0B\/1\.0KB$/);
    assert.equal(formatBytes(2_500_000), "2.5MB");
  });

  test("one bar per layer, in order of appearance, latest state wins", () => {
    const b = new LayerBoard();
    for (const m of [
      "pull layer aaaaaaaaaaaa waiting 0/10",
      "pull layer bbbbbbbbbbbb cached 10/10",
      "pull layer aaaaaaaaaaaa done 10/10",
      "unpack layer aaaaaaaaaaaa extracting 5/10",
    ]) {
      const l = parseLayerLine(m);
      if (l) b.update(l);
    }
    const lines = b.lines(4);
    assert.equal(lines.length, 2);
    assert.match(lines[0] ?? "", /^aaaaaaaaaaaa unpack extracting/);
    assert.match(lines[1] ?? "", /^bbbbbbbbbbbb pull cached/);
  });

  test("build errors point at the spec line of their step", () => {
    assert.equal(
      locateStepError("step 4 (RUN false) exited with code 1", [0, 0, 3, 5], "Dockerfile"),
      "step 4 (RUN false) exited with code 1 (Dockerfile line 5)",
    );
    assert.equal(locateStepError("step 1 (USER root) failed", [0, 0, 3], "Dockerfile"), "step 1 (USER root) failed");
    assert.equal(locateStepError("pull failed", [0, 3]), "pull failed");
  });
});
