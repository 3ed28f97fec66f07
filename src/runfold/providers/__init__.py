"""Model providers behind one small interface: Anthropic, OpenAI Chat and Responses, any
OpenAI-compatible server, the embedded local model and a scripted model (DESIGN.md §8)."""
