// A `Chat` on the AI SDK's `AbstractChat`, as `useChat` builds one (React state swapped for plain arrays).
import { BASE_URL, auth } from './helpers.mjs';

const sdks = { ai6: await import('ai6'), ai7: await import('ai7') };

export function sdk(name) {
  const found = sdks[name];
  if (!found) throw new Error(`AI_SDK must be ai6 or ai7, not ${name}`);
  return found;
}

class ArrayState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = 'ready';
    this.error = undefined;
    this.updates = 0;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
    this.updates++;
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), structuredClone(message), ...this.messages.slice(index + 1)];
    this.updates++;
  }
  snapshot(value) {
    return structuredClone(value);
  }
}

/** A chat on `/api/ai-sdk/chat` with `ai` (the ai6 or ai7 module), approvals sent automatically. */
export function createChat(ai, { id, token, messages = [] }) {
  class Chat extends ai.AbstractChat {
    constructor() {
      super({
        id,
        state: new ArrayState(messages),
        transport: new ai.DefaultChatTransport({ api: `${BASE_URL}/api/ai-sdk/chat`, headers: auth(token) }),
        sendAutomaticallyWhen: ai.lastAssistantMessageIsCompleteWithApprovalResponses,
      });
    }
  }
  return new Chat();
}

/** The parts of the chat's messages that matter, for comparing two copies of a history. */
export function essence(messages) {
  return messages.map((message) => ({
    role: message.role,
    parts: message.parts.map((part) => {
      const { type, text, toolCallId, state, input, output, approval } = part;
      // A text part's state is the client's bookkeeping (a user's has none), not content.
      const kept = { type, text, toolCallId, state: type === 'text' ? undefined : state, input, output };
      if (approval) kept.approval = { id: approval.id, approved: approval.approved, reason: approval.reason };
      return Object.fromEntries(Object.entries(kept).filter(([, value]) => value !== undefined));
    }),
  }));
}

export const lastMessage = (chat) => chat.messages[chat.messages.length - 1];

export const toolParts = (message) => message.parts.filter((part) => part.type.startsWith('tool-'));

export const textOf = (message) =>
  message.parts
    .filter((part) => part.type === 'text')
    .map((part) => part.text)
    .join('');
