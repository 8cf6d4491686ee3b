"""Optional integrations with agent frameworks, one module each.

Nothing here is imported by ``engine``: a module loads its framework when it is itself
imported (``from engine.integrations.pydantic_ai import DurableAgent`` needs
``pip install 'agentlog[pydantic-ai]'``).
"""

__all__: list[str] = []
