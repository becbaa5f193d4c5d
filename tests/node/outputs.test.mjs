// Structured output and approval metadata in the published clients, on the flight desk (`tests.outputs_app`):
// the AI SDK's `Chat` (AI_SDK=ai6 or ai7) and its history, or AG-UI's `HttpAgent` (AI_SDK empty).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { HttpAgent, buildResumeArray } from '@ag-ui/client';

import { createChat, essence, lastMessage, sdk, toolParts } from './chat.mjs';
import { BASE_URL, TOKEN, auth, getJson, newId, waitFor } from './helpers.mjs';

const version = process.env.AI_SDK;
const FARE_RULES = { fare: 'non-refundable', checked_bags: 1, price: 420 };

if (version) {
  const ai = sdk(version);

  test(`${version}: a union member is the output call's output and the message's metadata`, async () => {
    const id = newId('flights');
    const chat = createChat(ai, { id, token: TOKEN });
    await chat.sendMessage({ text: 'Flights to Atlantis?' });
    assert.equal(chat.status, 'ready', chat.error?.message);
    const reply = lastMessage(chat);
    // The first output was refused and asked again: its call is closed with the error, none left open.
    assert.deepEqual(
      toolParts(reply).map((part) => [part.type, part.state]),
      [
        ['tool-final_result_FlightFound', 'output-error'],
        ['tool-final_result_NoFlightFound', 'output-available'],
      ],
    );
    assert.deepEqual(toolParts(reply)[1].output, {});
    // The server names the agent that spoke (`agent`) beside the structured output.
    assert.deepEqual(reply.metadata, { agent: 'flights', output: {}, outputType: 'NoFlightFound' });

    await chat.sendMessage({ text: 'Flights to Lisbon?' });
    const found = lastMessage(chat);
    assert.deepEqual(found.metadata, {
      agent: 'flights',
      output: { flight_number: 'TP-101', destination: 'Lisbon', price: 420 },
      outputType: 'FlightFound',
    });
    assert.deepEqual(toolParts(found)[0].output, found.metadata.output);

    // After a reload, the history holds the same: the output in the call's part and in the metadata.
    const history = await getJson(`/api/ai-sdk/chat/${id}`);
    await ai.validateUIMessages({ messages: history.body.messages });
    assert.deepEqual(essence(history.body.messages), essence(chat.messages));
    assert.deepEqual(
      history.body.messages.map((message) => message.metadata),
      chat.messages.map((message) => message.metadata),
    );
  });

  test(`${version}: a call's metadata is its approval's descriptor, before and after the decision`, async () => {
    const id = newId('book');
    const chat = createChat(ai, { id, token: TOKEN });
    await chat.sendMessage({ text: 'Book TP-101' });
    const [book] = toolParts(lastMessage(chat));
    assert.equal(book.state, 'approval-requested');
    assert.deepEqual(book.approval.descriptor, FARE_RULES);

    await chat.addToolApprovalResponse({ id: book.approval.id, approved: true });
    await waitFor(
      () => chat.status === 'ready' && lastMessage(chat).metadata?.outputType === 'Booked',
      'the booking to be made',
    );
    const reply = lastMessage(chat);
    assert.equal(chat.messages.length, 2, 'the resumed run continues the same assistant message');
    assert.deepEqual(toolParts(reply)[0].approval.descriptor, FARE_RULES);
    assert.deepEqual(reply.metadata.output, { reference: 'BK-TP-101', flight_number: 'TP-101', passenger: 'Ada Lovelace' });
    const history = await getJson(`/api/ai-sdk/chat/${id}`);
    await ai.validateUIMessages({ messages: history.body.messages });
    assert.deepEqual(history.body.messages[1].parts.find((part) => part.type === 'tool-book').approval.descriptor, FARE_RULES);
    assert.deepEqual(essence(history.body.messages), essence(chat.messages));
    assert.deepEqual(history.body.messages[1].metadata, reply.metadata);
  });
} else {
  const agentFor = (threadId) => new HttpAgent({ url: `${BASE_URL}/api/ag-ui`, headers: auth(TOKEN), threadId });

  async function run(agent, parameters = {}) {
    const custom = [];
    const { result } = await agent.runAgent(parameters, {
      onEvent: ({ event }) => void (event.type === 'CUSTOM' && custom.push(event)),
    });
    return { result, custom };
  }

  test('ag-ui: the output call gets its result, and the run its output and type', async () => {
    const agent = agentFor(newId('flights'));
    agent.addMessage({ id: newId('user'), role: 'user', content: 'Flights to Atlantis?' });
    const { result, custom } = await run(agent);
    assert.deepEqual(result, {});
    const output = custom.find((event) => event.name === 'structured_output');
    assert.equal(output.value.output_type, 'NoFlightFound');
    // Every call the model made, the refused output included, has its result.
    const calls = agent.messages.flatMap((message) => message.toolCalls ?? []).map((call) => call.id);
    const results = agent.messages.filter((message) => message.role === 'tool').map((message) => message.toolCallId);
    assert.equal(calls.length, 2);
    assert.deepEqual(results, calls);
    assert.equal(results[1], output.value.tool_call_id);
  });

  test("ag-ui: an interrupt carries the call's metadata", async () => {
    const agent = agentFor(newId('book'));
    agent.addMessage({ id: newId('user'), role: 'user', content: 'Book TP-101' });
    await run(agent);
    const [interrupt] = agent.pendingInterrupts;
    assert.deepEqual(interrupt.metadata, FARE_RULES);
    const resume = buildResumeArray(agent.pendingInterrupts, {
      [interrupt.id]: { status: 'resolved', payload: { approved: true } },
    });
    const { result, custom } = await run(agent, { resume });
    assert.deepEqual(result, { reference: 'BK-TP-101', flight_number: 'TP-101', passenger: 'Ada Lovelace' });
    assert.equal(custom.find((event) => event.name === 'structured_output').value.output_type, 'Booked');
  });
}
