// Several agents (`tests.agent_chains:desk_app`: a router that hands the thread to billing, whose
// deposit goes billing → booking → payments, the charge needing approval) over the published clients:
// the AI SDK's `Chat` (AI_SDK=ai6 or ai7) or AG-UI's `HttpAgent` (AI_SDK empty).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { HttpAgent, buildResumeArray } from '@ag-ui/client';

import { createChat, essence, lastMessage, sdk, textOf, toolParts } from './chat.mjs';
import { BASE_URL, TOKEN, auth, getJson, newId, waitFor } from './helpers.mjs';

const version = process.env.AI_SDK;
const tool = (message, name) => toolParts(message).find((part) => part.type === `tool-${name}`);

if (version) {
  const ai = sdk(version);

  test(`${version}: a nested approval is answered through the protocol, approved, completed`, async () => {
    const id = newId('desk');
    const chat = createChat(ai, { id, token: TOKEN });
    await chat.sendMessage({ text: 'Hello' });
    assert.equal(chat.status, 'ready', chat.error?.message);
    assert.equal(lastMessage(chat).metadata.agent, 'router', 'who spoke is the message metadata');

    await chat.sendMessage({ text: 'Pay the deposit' });
    assert.equal(chat.status, 'ready', chat.error?.message);
    let reply = lastMessage(chat);
    assert.equal(reply.metadata.agent, 'billing');
    // The delegated agents' steps, nested: the outer call's preliminary output.
    const asked = tool(reply, 'ask_booking');
    assert.deepEqual([asked.state, asked.preliminary, asked.output.agent], ['output-available', true, 'booking']);
    const [payments] = asked.output.parts;
    assert.deepEqual([payments.type, payments.output.agent], ['tool-ask_payments', 'payments']);
    assert.deepEqual(payments.output.parts, [
      { type: 'tool-charge', toolCallId: 'payments_0_0', state: 'input-available', input: { cents: 300 } },
    ]);
    // The inner call waits at the top of the message, where the client answers it.
    const charge = tool(reply, 'charge');
    assert.deepEqual([charge.state, charge.input], ['approval-requested', { cents: 300 }]);

    await chat.addToolApprovalResponse({ id: charge.approval.id, approved: true });
    await waitFor(
      () => chat.status === 'ready' && tool(lastMessage(chat), 'ask_booking').preliminary !== true,
      'the approved charge and the delegations it ends',
    );
    assert.equal(chat.status, 'ready', chat.error?.message);
    reply = lastMessage(chat);
    assert.equal(chat.messages.length, 4, 'the resumed run continues the same assistant message');
    assert.deepEqual([tool(reply, 'charge').state, tool(reply, 'charge').output], ['output-available', 'charged 300']);
    assert.deepEqual([tool(reply, 'ask_booking').state, tool(reply, 'ask_booking').output], ['output-available', 'booking done']);
    assert.equal(textOf(reply), 'Your deposit is paid.');

    const history = await getJson(`/api/ai-sdk/chat/${id}`);
    await ai.validateUIMessages({ messages: history.body.messages });
    assert.deepEqual(essence(history.body.messages), essence(chat.messages));
    assert.deepEqual(history.body.messages.filter((m) => m.role === 'assistant').map((m) => m.metadata.agent), ['router', 'billing']);
  });
} else {
  test('AG-UI: a nested approval is an interrupt of a subagent, approved, completed', async () => {
    const agent = new HttpAgent({ url: `${BASE_URL}/api/ag-ui`, headers: auth(TOKEN), threadId: newId('desk') });
    const events = [];
    const run = (parameters = {}) => agent.runAgent(parameters, { onEvent: ({ event }) => void events.push(event) });
    agent.addMessage({ id: newId('user'), role: 'user', content: 'Hello' });
    await run();
    agent.addMessage({ id: newId('user'), role: 'user', content: 'Pay the deposit' });
    await run();

    const started = events.filter((event) => event.type === 'SUBAGENT_STARTED');
    assert.deepEqual(
      started.map((event) => [event.name, event.parentToolCallId, event.parentSubagentRunId]),
      [['booking', 'billing_2_0', undefined], ['payments', 'booking_0_0', 'billing_2_0']],
    );
    const [interrupt] = agent.pendingInterrupts;
    assert.equal(agent.pendingInterrupts.length, 1);
    assert.deepEqual([interrupt.toolCallId, interrupt.subagentRunId], ['payments_0_0', 'booking_0_0']);
    const suspended = events.filter((event) => event.type === 'SUBAGENT_FINISHED').map((event) => [event.subagentRunId, event.outcome]);
    assert.deepEqual(suspended, [
      ['booking_0_0', { type: 'suspended', interruptIds: [interrupt.id] }],
      ['billing_2_0', { type: 'suspended', interruptIds: [] }],
    ]);
    const names = events.filter((event) => event.type === 'TEXT_MESSAGE_START').map((event) => event.name);
    assert.deepEqual(names, ['router']);

    events.length = 0;
    const resume = buildResumeArray(agent.pendingInterrupts, {
      [interrupt.id]: { status: 'resolved', payload: { approved: true } },
    });
    const { result } = await run({ resume });
    assert.equal(result, 'Your deposit is paid.');
    assert.deepEqual(agent.pendingInterrupts, []);
    const inner = events.filter((event) => event.subagentRunId === 'booking_0_0' && event.type === 'TOOL_CALL_RESULT');
    assert.deepEqual(inner.map((event) => event.content), ['charged 300']);
    // The resumed run announces the invocations again, outermost first, the chain known.
    const again = events.filter((event) => event.type === 'SUBAGENT_STARTED');
    assert.deepEqual(
      again.map((event) => [event.subagentRunId, event.name, event.parentSubagentRunId]),
      [['billing_2_0', 'booking', undefined], ['booking_0_0', 'payments', 'billing_2_0']],
    );
    const finished = events.filter((event) => event.type === 'SUBAGENT_FINISHED').map((event) => [event.subagentRunId, event.result]);
    assert.deepEqual(finished, [['booking_0_0', 'payments charged'], ['billing_2_0', 'booking done']]);
  });
}
