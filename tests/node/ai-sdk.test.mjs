// The AI SDK's `Chat` (what `useChat` is built on) and `DefaultChatTransport`, version AI_SDK (ai6 or ai7).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { createChat, essence, lastMessage, sdk, textOf, toolParts } from './chat.mjs';
import { BASE_URL, OTHER_TOKEN, TOKEN, auth, getJson, newId, waitFor } from './helpers.mjs';

const version = process.env.AI_SDK;
const ai = sdk(version);

const tool = (message, name) => toolParts(message).find((part) => part.type === `tool-${name}`);

test(`${version}: a question is streamed`, async () => {
  const chat = createChat(ai, { id: newId('question'), token: TOKEN });
  await chat.sendMessage({ text: 'Where is my order ORD-5678?' });
  assert.equal(chat.status, 'ready', chat.error?.message);
  const reply = lastMessage(chat);
  assert.equal(reply.role, 'assistant');
  assert.equal(textOf(reply), 'Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111).');
  const lookup = tool(reply, 'lookup_order');
  assert.deepEqual([lookup.state, lookup.input], ['output-available', { order_id: 'ORD-5678' }]);
  assert.equal(lookup.output.tracking, 'TRK-111');
  // The reply was built piece by piece as the words came, not in one go at the end.
  assert.ok(chat.state.updates > 6, `only ${chat.state.updates} updates`);
});

test(`${version}: a refund is paused, approved, then made`, async () => {
  const id = newId('refund');
  const chat = createChat(ai, { id, token: TOKEN });
  await chat.sendMessage({ text: 'Please refund ORD-5678' });
  const refund = tool(lastMessage(chat), 'issue_refund');
  assert.equal(refund.state, 'approval-requested');
  assert.deepEqual(refund.input, { order_id: 'ORD-5678', amount: 99.98, reason: 'Please refund ORD-5678' });

  await chat.addToolApprovalResponse({ id: refund.approval.id, approved: true });
  await waitFor(
    () => chat.status === 'ready' && tool(lastMessage(chat), 'issue_refund').state === 'output-available',
    'the approved refund',
  );
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2, 'the resumed run continues the same assistant message');
  const reply = lastMessage(chat);
  assert.equal(tool(reply, 'issue_refund').output.refunded, 99.98);
  assert.equal(textOf(reply), 'Refunded $99.98 for ORD-5678.');

  // The thread's history, loaded as UIMessages, is what the client streamed: valid, and the same.
  const history = await getJson(`/api/ai-sdk/chat/${id}`);
  assert.equal(history.status, 200);
  assert.equal(history.body.id, id);
  await ai.validateUIMessages({ messages: history.body.messages });
  assert.deepEqual(essence(history.body.messages), essence(chat.messages));
  assert.equal(history.body.messages[0].id, chat.messages[0].id, "the user message keeps the client's id");
  assert.equal(history.body.messages[1].id, chat.messages[1].id);
});

test(`${version}: a cancellation is rejected with a reason`, async () => {
  const chat = createChat(ai, { id: newId('cancel'), token: TOKEN });
  await chat.sendMessage({ text: 'Please cancel ORD-9012' });
  const cancel = tool(lastMessage(chat), 'cancel_order');
  assert.equal(cancel.state, 'approval-requested');

  await chat.addToolApprovalResponse({ id: cancel.approval.id, approved: false, reason: 'the customer changed their mind' });
  await waitFor(
    () => chat.status === 'ready' && tool(lastMessage(chat), 'cancel_order').state === 'output-denied',
    'the rejected cancellation',
  );
  assert.equal(chat.messages.length, 2);
  assert.match(textOf(lastMessage(chat)), /was rejected: .*the customer changed their mind/);
  const order = await getJson(`/api/ai-sdk/chat/${chat.id}`);
  assert.deepEqual(essence(order.body.messages), essence(chat.messages));
});

test(`${version}: a reload in the middle of a run resumes it, nothing lost or repeated`, async () => {
  const id = newId('reload');
  const first = createChat(ai, { id, token: TOKEN });
  const sending = first.sendMessage({ text: 'Look up ORD-5678, and loop forever' });
  await waitFor(
    () => first.messages.length === 2 && toolParts(lastMessage(first)).some((part) => part.state === 'output-available'),
    'the run to be under way',
  );
  await first.stop(); // the page goes away; the run goes on
  await sending;

  const loaded = await getJson(`/api/ai-sdk/chat/${id}`);
  assert.equal(textOf(loaded.body.messages.at(-1)), '', 'the reload happened before the reply was written');
  const second = createChat(ai, { id, token: TOKEN, messages: loaded.body.messages });
  await second.resumeStream();
  await waitFor(() => second.status === 'ready', 'the resumed stream to end');
  assert.equal(second.status, 'ready', second.error?.message);
  assert.ok(second.state.updates > 0, 'the resume GET streamed the active run');

  assert.equal(second.messages.length, 2);
  const reply = lastMessage(second);
  assert.match(textOf(reply), /took more steps than I'm allowed/);
  const calls = toolParts(reply).map((part) => part.toolCallId);
  assert.ok(calls.length >= 5, `only ${calls.length} calls`);
  assert.equal(new Set(calls).size, calls.length, 'no call repeated');
  assert.ok(toolParts(reply).every((part) => part.state === 'output-available'));
  const after = await getJson(`/api/ai-sdk/chat/${id}`);
  assert.deepEqual(essence(second.messages), essence(after.body.messages));
  assert.equal((await getJson(`/api/ai-sdk/chat/${id}/stream`)).status, 204, 'no run is active any more');
});

test(`${version}: the last reply is regenerated`, async () => {
  const id = newId('regenerate');
  const chat = createChat(ai, { id, token: TOKEN });
  await chat.sendMessage({ text: 'Where is ORD-3456?' });
  const before = lastMessage(chat);
  await chat.regenerate();
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(chat.messages.length, 2);
  const after = lastMessage(chat);
  assert.notEqual(after.id, before.id);
  assert.equal(textOf(after), textOf(before));
  const history = await getJson(`/api/ai-sdk/chat/${id}`);
  assert.deepEqual(
    history.body.messages.map((message) => message.id),
    chat.messages.map((message) => message.id),
  );
});

test(`${version}: another user's token is refused`, async () => {
  const id = newId('mine');
  const chat = createChat(ai, { id, token: TOKEN });
  await chat.sendMessage({ text: 'Please refund ORD-3456' });
  const refund = tool(lastMessage(chat), 'issue_refund');
  assert.equal(refund.state, 'approval-requested');

  // Another user with the same chat id has a chat of their own: empty, nothing running.
  assert.deepEqual((await getJson(`/api/ai-sdk/chat/${id}`, OTHER_TOKEN)).body, { id, messages: [] });
  assert.equal((await getJson(`/api/ai-sdk/chat/${id}/stream`, OTHER_TOKEN)).status, 204);
  // Answering the first user's call from there is refused.
  const intruder = createChat(ai, { id, token: OTHER_TOKEN, messages: structuredClone(chat.messages) });
  await intruder.addToolApprovalResponse({ id: refund.approval.id, approved: true });
  await waitFor(() => intruder.status === 'error', 'the refusal');
  assert.match(intruder.error.message, /not_found/);
  // A token that is not one is refused outright.
  const stranger = createChat(ai, { id, token: 'not-a-token' });
  await stranger.sendMessage({ text: 'Hello' });
  assert.equal(stranger.status, 'error');
  assert.match(stranger.error.message, /invalid_token/);
  // The call still waits for its owner.
  const history = await getJson(`/api/ai-sdk/chat/${id}`);
  assert.equal(tool(history.body.messages.at(-1), 'issue_refund').state, 'approval-requested');
});

test(`${version}: a file is sent, kept on the thread and read back from the history`, async () => {
  const id = newId('file');
  const chat = createChat(ai, { id, token: TOKEN });
  const png = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(64, 7)]);
  const url = `data:image/png;base64,${png.toString('base64')}`;
  await chat.sendMessage({
    text: 'Here is a photo of ORD-5678',
    files: [{ type: 'file', mediaType: 'image/png', filename: 'photo.png', url }],
  });
  assert.equal(chat.status, 'ready', chat.error?.message);

  const history = await getJson(`/api/ai-sdk/chat/${id}`);
  assert.equal(history.status, 200);
  await ai.validateUIMessages({ messages: history.body.messages });
  const file = history.body.messages[0].parts.find((part) => part.type === 'file');
  assert.equal(file.mediaType, 'image/png');
  assert.equal(file.filename, 'photo.png');
  assert.match(file.url, /^\/api\/threads\/[^/]+\/files\/[^/]+$/);
  // The url is the file's endpoint: the same bytes, for this user only.
  const mine = await fetch(`${BASE_URL}${file.url}`, { headers: auth() });
  assert.equal(mine.status, 200);
  assert.deepEqual(Buffer.from(await mine.arrayBuffer()), png);
  const theirs = await fetch(`${BASE_URL}${file.url}`, { headers: auth(OTHER_TOKEN) });
  assert.equal(theirs.status, 404);
});

test(`${version}: a photo alone is a message, and the transport's body sent again stores it once`, async () => {
  const id = newId('photo');
  const chat = createChat(ai, { id, token: TOKEN });
  const png = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(32, 9)]);
  const url = `data:image/png;base64,${png.toString('base64')}`;
  await chat.sendMessage({ files: [{ type: 'file', mediaType: 'image/png', filename: 'photo.png', url }] });
  assert.equal(chat.status, 'ready', chat.error?.message);
  assert.equal(lastMessage(chat).role, 'assistant');

  // What the transport posted, posted again (a retry after a dropped connection).
  const body = { id, trigger: 'submit-message', messages: [chat.messages[0]] };
  const again = await fetch(`${BASE_URL}/api/ai-sdk/chat`, {
    method: 'POST',
    headers: { ...auth(), 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(again.status, 200);
  await again.text();
  const history = await getJson(`/api/ai-sdk/chat/${id}`);
  await ai.validateUIMessages({ messages: history.body.messages });
  assert.deepEqual(
    history.body.messages.map((message) => message.role),
    ['user', 'assistant'],
  );
  const file = history.body.messages[0].parts.find((part) => part.type === 'file');
  const threadId = file.url.split('/')[3];
  const files = await getJson(`/api/threads/${threadId}/files`);
  assert.deepEqual(
    files.body.files.map((f) => [f.name, f.size]),
    [['photo.png', png.length]],
  );
});
