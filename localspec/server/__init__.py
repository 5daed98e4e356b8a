"""`localspec serve`: an OpenAI-compatible HTTP server over one Session.

app.py (routes) -> schema.py / messages.py / fields.py (request -> GenConfig) -> worker.py
(the one thread that runs the session) -> replies.py (whole body or event stream) -> stream.py
(response and SSE chunk shapes).
Nothing here touches llama.cpp: it consumes Session events only, like the TUI.
"""
