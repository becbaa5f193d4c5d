// AG-UI's `HttpAgent` (what CopilotKit drives) against `POST /api/ag-ui`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { HttpAgent, buildResumeArray } from '@ag-ui/client';

import { BASE_URL, OTHER_TOKEN, TOKEN, auth, newId } from './helpers.mjs';

function agentFor(threadId, token = TOKEN) {
  return new HttpAgent({ url: `${BASE_URL}/api/ag-ui`, headers: auth(token), threadId });
}

function ask(agent, content) {
  agent.addMessage({ id: newId('user'), role: 'user', content });
}

async function run(agent, parameters = {}) {
  const types = [];
  const { result } = await agent.runAgent(parameters, { onEvent: ({ event }) => void types.push(event.type) });
  return { result, types };
}

const answer = (agent, payload) =>
  buildResumeArray(
    agent.pendingInterrupts,
    Object.fromEntries(agent.pendingInterrupts.map((interrupt) => [interrupt.id, { status: 'resolved', payload }])),
  );

test('a question is streamed', async () => {
  const agent = agentFor(newId('question'));
  ask(agent, 'Where is my order ORD-5678?');
  const { result, types } = await run(agent);
  assert.equal(result, 'Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111).');
  assert.equal(types[0], 'RUN_STARTED');
  assert.equal(types.at(-1), 'RUN_FINISHED');
  assert.ok(types.filter((type) => type === 'TEXT_MESSAGE_CONTENT').length > 3, 'the text came word by word');
  assert.deepEqual(
    agent.messages.map((message) => message.role),
    ['user', 'assistant', 'tool', 'assistant'],
  );
  assert.equal(agent.messages[1].toolCalls[0].function.name, 'lookup_order');
  assert.deepEqual(agent.pendingInterrupts, []);
});

test('a refund is paused, approved with edited arguments, then made', async () => {
  const agent = agentFor(newId('refund'));
  ask(agent, 'Please refund ORD-5678');
  await run(agent);
  const [interrupt] = agent.pendingInterrupts;
  assert.equal(agent.pendingInterrupts.length, 1);
  assert.equal(interrupt.reason, 'tool_call');
  assert.deepEqual(interrupt.responseSchema.required, ['approved']);

  const editedArgs = { order_id: 'ORD-5678', amount: 50, reason: 'partial refund' };
  const { result } = await run(agent, { resume: answer(agent, { approved: true, editedArgs }) });
  assert.equal(result, 'Refunded $50.00 for ORD-5678.');
  assert.deepEqual(agent.pendingInterrupts, []);
  const toolResult = agent.messages.find((message) => message.role === 'tool' && message.toolCallId === interrupt.toolCallId);
  assert.equal(JSON.parse(toolResult.content).refunded, 50);
});

test('a cancellation is rejected with a reason', async () => {
  const agent = agentFor(newId('cancel'));
  ask(agent, 'Please cancel ORD-9012');
  await run(agent);
  assert.equal(agent.pendingInterrupts.length, 1);
  const { result } = await run(agent, { resume: answer(agent, { approved: false, reason: 'changed my mind' }) });
  assert.match(result, /was rejected: .*changed my mind/);
});

test('edited arguments that do not fit the tool are refused, and the call still waits', async () => {
  const agent = agentFor(newId('invalid'));
  ask(agent, 'Please refund ORD-9012');
  await run(agent);
  await assert.rejects(run(agent, { resume: answer(agent, { approved: true, editedArgs: { amount: 'lots' } }) }), /422|invalid_arguments/);
  const { result } = await run(agent, { resume: answer(agent, { approved: false, reason: 'not now' }) });
  assert.match(result, /not now/);
});

test("another user's token is refused", async () => {
  const threadId = newId('mine');
  const agent = agentFor(threadId);
  ask(agent, 'Please refund ORD-3456');
  await run(agent);
  const interrupts = agent.pendingInterrupts;
  assert.equal(interrupts.length, 1);

  const intruder = agentFor(threadId, OTHER_TOKEN);
  intruder.pendingInterrupts = interrupts;
  await assert.rejects(run(intruder, { resume: answer(intruder, { approved: true }) }), /404|not_found/);
  await assert.rejects(run(agentFor(threadId, 'not-a-token'), {}), /401|invalid_token/);
  // The call still waits for its owner, who can decide it.
  const { result } = await run(agent, { resume: answer(agent, { approved: false, reason: 'no' }) });
  assert.match(result, /rejected/);
});
