// What the client tests share: the server they drive (from tests/test_node_clients.py) and small helpers.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

export const BASE_URL = process.env.DURABLE_CHAT_URL;
export const TOKEN = process.env.DURABLE_CHAT_TOKEN;
export const OTHER_TOKEN = process.env.DURABLE_CHAT_OTHER_TOKEN;
assert.ok(BASE_URL && TOKEN && OTHER_TOKEN, 'run through tests/test_node_clients.py, which starts the server');

export const auth = (token = TOKEN) => ({ Authorization: `Bearer ${token}` });

export const newId = (prefix) => `${prefix}-${randomUUID()}`;

/** Poll `condition` until it holds (bounded, generous: these tests never time anything). */
export async function waitFor(condition, what, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export async function getJson(path, token = TOKEN) {
  const response = await fetch(`${BASE_URL}${path}`, { headers: auth(token) });
  return { status: response.status, body: response.status === 204 ? null : await response.json() };
}
