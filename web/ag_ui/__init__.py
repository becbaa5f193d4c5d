"""The AG-UI protocol: its endpoint (`endpoints`) and the pure encoder of stream events into AG-UI events (`encoder`)."""
