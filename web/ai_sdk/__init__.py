"""The AI SDK's UI message stream protocol: the endpoints `useChat` talks to (`endpoints`), the pure
encoder of stream events into its chunks (`encoder`), and a thread's history as `UIMessage`s (`history`)."""
