"""Every registered launcher hands the stages an OpenAI client to the runtime (`Launcher.client`),
the call a bench makes for each arm; no launcher shadows it with a client of its own engine.
Making the client opens no connection, so this runs without the runtime or the Docker engine."""

from __future__ import annotations

import pytest

from suite.client import GenerationParams, OpenAIClient
from suite.launchers import LAUNCHERS, get_launcher


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_each_launcher_gives_the_stages_an_openai_client(name: str) -> None:
    launcher = get_launcher(name)
    params = GenerationParams(seed=7)
    with launcher.client("http://127.0.0.1:9", "tiny", params=params, api_key="k") as client:
        assert isinstance(client, OpenAIClient)
        assert client.params.seed == 7
