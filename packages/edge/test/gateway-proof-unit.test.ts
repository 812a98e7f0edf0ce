import assert from "node:assert/strict";
import { test } from "node:test";
import { GATEWAY_PROOF_HEADER } from "@aenv/protocol";
import { gatewayProof, hasGatewayProof, withGatewayProof } from "../src/gateway-proof.js";

const OP = "operator key 0123456789abcdef";

test("a gateway's proof is bound to the operator's key and to the caller's key", () => {
  const p = gatewayProof(OP, "ak_a");
  assert.equal(hasGatewayProof(OP, { "x-api-key": "ak_a", [GATEWAY_PROOF_HEADER]: p }), true);
  assert.equal(hasGatewayProof(OP, { authorization: "Bearer ak_a", [GATEWAY_PROOF_HEADER]: p }), true);
  assert.equal(hasGatewayProof(OP, { "x-api-key": "ak_b", [GATEWAY_PROOF_HEADER]: p }), false, "another key");
  assert.equal(hasGatewayProof("another cluster", { "x-api-key": "ak_a", [GATEWAY_PROOF_HEADER]: p }), false);
  assert.equal(hasGatewayProof(OP, { "x-api-key": "ak_a" }), false, "none");
  assert.equal(hasGatewayProof(OP, { [GATEWAY_PROOF_HEADER]: p }), false, "no key");
  assert.equal(hasGatewayProof(OP, { "x-api-key": "ak_a", [GATEWAY_PROOF_HEADER]: `${p}x` }), false);
  assert.equal(hasGatewayProof(OP, { "x-api-key": "ak_a", [GATEWAY_PROOF_HEADER]: "" }), false);
});

test("what a gateway sends a node: the client's own proof dropped, its own added when there is a key", () => {
  const forged = { "x-api-key": "ak_a", [GATEWAY_PROOF_HEADER]: "forged" };
  const out = withGatewayProof(OP, forged, { ...forged });
  assert.equal(out[GATEWAY_PROOF_HEADER], gatewayProof(OP, "ak_a"));
  const keyless = withGatewayProof(OP, { [GATEWAY_PROOF_HEADER]: "forged" }, { [GATEWAY_PROOF_HEADER]: "forged" });
  assert.equal(GATEWAY_PROOF_HEADER in keyless, false);
});
