import type { RecordStore } from "@aenv/edge/record-store";

/** A webhook as stored: what the API answers plus the secret it signs deliveries with. */
export interface WebhookRecord {
  id: string;
  name: string;
  url: string;
  enabled: boolean;
  events: string[];
  secret: string;
  createdAt: string;
  /** The API key that registered it (absent: the operator's): it hears of that key's sandboxes only. */
  owner?: string;
}

/**
 * Where webhooks are kept: a node's own file (DATA/webhooks/webhooks.json), or a cluster's
 * Redis hash `aenv:webhooks` so that every node delivers its own sandboxes' events to every
 * webhook.
 */
export type WebhookStore = RecordStore<WebhookRecord>;
export const WEBHOOKS_FILE = "webhooks.json";
export const WEBHOOKS_KEY = "aenv:webhooks";
