"""One openai-agents run with a function tool against a localspec server: the chat-completions
and the Responses API tests drive the same agent through the two model classes."""

from __future__ import annotations


def run_weather_agent(url: str, model_class: str) -> tuple[list[str], object]:
    """Run the agent (`model_class`: 'OpenAIChatCompletionsModel' or 'OpenAIResponsesModel')
    on 'What's the weather in Paris?'; returns the cities the tool was called with and the
    run's result."""
    import agents
    import openai

    agents.set_tracing_disabled(True)
    seen: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        seen.append(city)
        return f"It is 21 degrees and sunny in {city}."

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    model = getattr(agents, model_class)(model="qwen", openai_client=client)
    agent = agents.Agent(name="weather", instructions="Use the tool to answer.", tools=[get_weather], model=model)
    return seen, agents.Runner.run_sync(agent, "What's the weather in Paris?", max_turns=4)
