"""The flag table of both command lines (`batch_runner.py` and `run_agent.py`): one row per flag
with its type, default, one-line help, help group and the CLIs that accept it.

The table drives everything about flags: parsing and checking (agent.cli.flag_values), the
`--help` pages (agent.cli.help_page) and, through the configs built from the parsed values,
`run_config.json`. Defaults are not written here: each is read from the field of the frozen
config it fills (AgentConfig, RunConfig, SandboxOptions), so a default lives in one place.
"""

from __future__ import annotations

from typing import Any

from agent.cli.flag import BATCH, BATCH_ONLY, BOTH, CLIS, GROUPS, QUERY, QUERY_ONLY, Flag, Kind, default_of
from agent.config.agent_config import DIALECTS, PROVIDER_SORTS, REASONING_EFFORTS, AgentConfig
from agent.config.dataset_config import DatasetOptions
from agent.config.export_config import REASONING_PLACES, ExportOptions
from agent.config.run_config import MAX_EMBEDDED_THREADS, MAX_PRICE, RUN_BACKENDS, RunConfig
from agent.config.sampling import MAX_STOP, Sampling
from agent.config.verify_config import KEEP_MODES, MATCH_MODES, VerifyOptions
from agent.protocols import IMAGE_APIS, WEB_BACKENDS, ToolConfig
from agent.protocols.tokens import TOKEN_CAPTURE_MODES
from agent.sandboxes import AUTO, BACKENDS, SandboxOptions

_BOTH, _BATCH, _QUERY = BOTH, BATCH_ONLY, QUERY_ONLY  # short names for the table

__all__ = ["BATCH", "BY_NAME", "CLIS", "FLAGS", "GROUPS", "QUERY", "Flag", "Kind", "flags_of"]


def _agent(name: str) -> Any:
    return default_of(AgentConfig, name)


def _run(name: str) -> Any:
    return default_of(RunConfig, name)


def _tool(name: str) -> Any:
    return default_of(ToolConfig, name)


def _export(name: str) -> Any:
    return default_of(ExportOptions, name)


def _sampling(name: str) -> Any:
    return default_of(Sampling, name)


def _dataset(name: str) -> Any:
    return default_of(DatasetOptions, name)


def _verify(name: str) -> Any:
    return default_of(VerifyOptions, name)


FLAGS: tuple[Flag, ...] = (
    # Run
    Flag("dataset_file", "str", None,
         "the prompts: a JSONL or Parquet file, a datasets directory, or hf://datasets/org/name[/config][:split]",
         "Run", _BATCH, required=True),
    Flag("prompt_field", "str", _dataset("prompt_field"), "the dataset column holding the prompt", "Run",
         _BATCH),
    Flag("field_map", "list", _dataset("field_map"),
         "comma list of field=column: dataset columns read as row fields (image, cwd, metadata, sampling, "
         "verify, answer)", "Run", _BATCH, shown="none"),
    Flag("dataset_revision", "str", _dataset("revision"),
         "a Hub dataset's branch, tag or commit (the commit it resolves to is pinned for --resume)", "Run",
         _BATCH, shown="main"),
    Flag("distributions_file", "str", _run("distributions_file"),
         "YAML or JSON file of distributions (name: {description, toolsets: {toolset: percent}}) adding to "
         "or overriding the built-in ones", "Run", _BATCH, shown="none"),
    Flag("batch_size", "int", None, "attempts (prompts × samples) per shard batch_N.jsonl", "Run", _BATCH,
         required=True, minimum=1),
    Flag("run_name", "str", None, "run directory name under --output_dir (letters, digits, ._-)", "Run",
         _BATCH, required=True),
    Flag("output_dir", "str", _run("output_dir"), "where run directories go", "Run", _BATCH),
    Flag("resume", "bool", _run("resume"), "continue a run: skip prompts already done, retry failed ones",
         "Run", _BATCH),
    Flag("max_samples", "int", _run("max_samples"), "first N valid prompts only (prompts, not attempts)",
         "Run", _BATCH, minimum=1, shown="all"),
    Flag("distribution", "str", _run("distribution"), "toolset distribution sampled per attempt", "Run",
         _BATCH),
    Flag("seed", "int", _run("seed"), "toolset sampling seed (reproducible per prompt)", "Run", _BATCH),
    Flag("list_distributions", "bool", False,
         "print distributions, toolset and sandbox availability, then exit", "Run", _BATCH),
    # Query
    Flag("query", "str", None, "the question to answer", "Query", _QUERY, required=True),
    Flag("enabled_toolsets", "list", _agent("enabled_toolsets"), "comma list of toolsets to offer",
         "Query", _QUERY, shown="all"),
    Flag("disabled_toolsets", "list", _agent("disabled_toolsets"), "comma list of toolsets to leave out",
         "Query", _QUERY, shown="none"),
    Flag("save_trajectories", "bool", False, "append the conversation to ./trajectory_samples.jsonl (or"
         " ./failed_trajectories.jsonl; also agent.save_trajectories in config.yaml)", "Query", _QUERY),
    # Model endpoint
    Flag("model", "str", _agent("model"), "model id; embedded or embedded:/path.gguf serves a local model",
         "Model endpoint"),
    Flag("base_url", "str", _agent("base_url"), "any OpenAI-compatible endpoint", "Model endpoint"),
    Flag("api_key", "str", _agent("api_key"), "never written anywhere", "Model endpoint",
         shown="OPENROUTER_API_KEY / OPENAI_API_KEY"),
    Flag("api_dialect", "str", _agent("api_dialect"), "which request extensions the endpoint understands",
         "Model endpoint", choices=DIALECTS),
    Flag("request_timeout", "float", _agent("request_timeout"),
         "seconds per model call attempt, all of it (connect, headers, whole body)", "Model endpoint"),
    Flag("max_retries", "int", _agent("max_retries"), "retries of a transient model-call failure",
         "Model endpoint", minimum=0),
    Flag("max_reply_bytes", "int", _agent("max_reply_bytes"),
         "largest reply body accepted from the endpoint; a larger one fails the prompt (invalid_response)",
         "Model endpoint", minimum=1),
    Flag("embedded_threads", "int", _run("embedded_threads"),
         "CPU threads of the embedded model (at most 1024)",
         "Model endpoint", minimum=1, maximum=MAX_EMBEDDED_THREADS),
    # Conversation
    Flag("max_turns", "int", _agent("max_iterations"), "model calls per conversation", "Conversation",
         minimum=1),
    Flag("max_tokens", "int", _agent("max_tokens"), "output-token cap per model call", "Conversation",
         minimum=1, shown="model default"),
    Flag("temperature", "number", _sampling("temperature"), "sampling temperature, from 0 to 2",
         "Conversation", shown="server default (not sent)"),
    Flag("top_p", "number", _sampling("top_p"), "nucleus sampling: above 0, at most 1", "Conversation",
         shown="server default (not sent)"),
    Flag("stop", "str", None,
         f"up to {MAX_STOP} stop sequences: a comma list, or a JSON array for ones holding commas, "
         "newlines or edge spaces", "Conversation", shown="none"),
    Flag("model_seed", "int", _sampling("seed"),
         "the request's seed, for repeatable sampling where the server supports it (not the toolset --seed)",
         "Conversation", shown="none"),
    Flag("sampling_extra", "str", None,
         'JSON object of extra request fields for servers that take them: {"top_k": 40, "min_p": 0.05}',
         "Conversation", shown="none"),
    Flag("reasoning_effort", "str", None, "reasoning effort requested", "Conversation",
         choices=REASONING_EFFORTS, shown="model default"),
    Flag("reasoning_disabled", "bool", False, 'disable reasoning: sends {"effort": "none"}',
         "Conversation"),
    Flag("capture_tokens", "str", _agent("capture_tokens"),
         "record each model call's token ids and logprobs beside the text (tokens.jsonl): auto where the "
         "endpoint gives them, required to stop when it cannot", "Conversation", _BATCH,
         choices=TOKEN_CAPTURE_MODES),
    Flag("ephemeral_system_prompt", "str", _agent("ephemeral_system_prompt"),
         "system prompt used at call time, never saved", "Conversation", shown="none"),
    Flag("prefill_messages_file", "str", None,
         "JSON array of {role, content} inserted after the system message, never saved", "Conversation",
         shown="none"),
    # Provider routing
    Flag("providers_allowed", "list", _agent("providers_allowed"), "comma list of providers to allow",
         "Provider routing (OpenRouter)", shown="any"),
    Flag("providers_ignored", "list", _agent("providers_ignored"), "comma list of providers to skip",
         "Provider routing (OpenRouter)", shown="none"),
    Flag("providers_order", "list", _agent("providers_order"), "comma list of providers to try first",
         "Provider routing (OpenRouter)", shown="none"),
    Flag("provider_sort", "str", _agent("provider_sort"), "how providers are ranked",
         "Provider routing (OpenRouter)", choices=PROVIDER_SORTS, shown="none"),
    # Workers and budgets
    Flag("num_workers", "int", _run("num_workers"),
         "worker processes (or Ray actors); never more than prompts to run", "Workers and budgets", _BATCH,
         minimum=1),
    Flag("max_inflight", "int", _run("max_inflight"), "model calls in flight at once across all workers",
         "Workers and budgets", _BATCH, minimum=1),
    Flag("prompt_timeout", "float", _run("prompt_timeout"), "wall-clock seconds per prompt",
         "Workers and budgets", _BATCH, shown="none"),
    Flag("max_prompt_attempts", "int", _run("max_prompt_attempts"),
         "times a prompt may lose its worker (killed, OOM) before it counts as failed in this run",
         "Workers and budgets", _BATCH, minimum=1),
    Flag("rpm", "float", _run("rpm"), "requests per minute of the whole run, shared by all workers (≥ 0.01)",
         "Workers and budgets", _BATCH, shown="none", minimum=0.01),
    Flag("tpm", "float", _run("tpm"), "tokens per minute of the whole run, shared by all workers",
         "Workers and budgets", _BATCH, shown="none"),
    # Sandbox
    Flag("sandbox", "str", default_of(SandboxOptions, "backend"),
         f"where tool calls run: {AUTO} (bwrap when it works here, else local), {', '.join(BACKENDS)}",
         "Sandbox", shown=f"{default_of(SandboxOptions, 'backend')} (or TERMINAL_ENV)"),
    Flag("image", "str", default_of(SandboxOptions, "default_image"), "default container image (docker)",
         "Sandbox", _BATCH),
    Flag("sandbox_network", "bool", default_of(SandboxOptions, "network"), "allow network inside containers",
         "Sandbox", _BATCH),
    Flag("sandbox_disk_mb", "int", default_of(SandboxOptions, "disk_mb"),
         "MB a prompt may write into its sandbox (bwrap under root, docker; not local)", "Sandbox",
         minimum=1),
    Flag("sandbox_memory_mb", "int", default_of(SandboxOptions, "memory_mb"),
         "MB of memory all of a prompt's sandbox processes may hold together; past it a command is "
         "killed and its tool result says so (0: no limit)", "Sandbox", minimum=0),
    # Tools
    Flag("web_backend", "str", _tool("web_backend"),
         "web_search backend (auto: the corpus if --web_corpus, else the first API with a key)", "Tools",
         choices=WEB_BACKENDS),
    Flag("web_corpus", "str", _tool("web_corpus"), "folder of .md/.html/.txt: the offline web backend",
         "Tools", shown="none"),
    Flag("allow_hosts", "list", _tool("allow_hosts"),
         "hosts or networks (CIDR), each with an optional :port, the tools may reach though private",
         "Tools", shown="none"),
    Flag("vision_model", "str", _tool("vision_model"), "model for vision_analyze and browser_vision",
         "Tools", shown="--model"),
    Flag("image_model", "str", _tool("image_model"), "model for image_generate", "Tools",
         shown="the image API's default"),
    Flag("moa_models", "list", _tool("moa_models"), "comma list of reference models for mixture_of_agents",
         "Tools", shown="none"),
    Flag("moa_aggregator", "str", _tool("moa_aggregator"), "aggregator model for mixture_of_agents",
         "Tools", shown="--model"),
    Flag("browser_executable", "str", _tool("browser_executable"), "Chromium for the browser tools",
         "Tools", shown="chromium-headless-shell or chromium on PATH"),
    Flag("allow_missing_toolsets", "bool", _run("allow_missing_toolsets"),
         "run although the distribution (run_agent.py: --enabled_toolsets) needs a toolset "
         "unavailable here (it is left out)", "Tools"),
    Flag("image_api", "str", _tool("image_api"),
         "how image_generate asks: the images endpoint or an image-output chat model", "Tools",
         choices=IMAGE_APIS),
    Flag("web_api_url", "str", _tool("web_api_url"), "base URL of the web search API (self-hosted Firecrawl)",
         "Tools", shown="FIRECRAWL_API_URL, else the vendor's"),
    Flag("web_corpus_url", "str", _tool("web_corpus_url"),
         "URL where --web_corpus is served: web_search results link there, web_extract maps them back",
         "Tools", shown="none"),
    Flag("mcp_config", "str", None,
         'JSON file of MCP servers ({"mcpServers": {name: {command, args, env} | {url, headers}}}): each '
         "server is a toolset of its tools", "Tools", shown="none"),
    Flag("tools_module", "list", _tool("tools_modules"),
         "comma list of Python modules (dotted names, or .py files) whose TOOLSET (or TOOLSETS) adds your "
         "own toolsets", "Tools",
         shown="none"),
    # Logging
    Flag("verbose", "bool", _run("verbose"), "log every tool call and result", "Logging"),
    Flag("quiet", "bool", False, "warnings and errors only", "Logging", _QUERY),
    Flag("log_prefix_chars", "int", _agent("log_prefix_chars"), "preview length in verbose logs",
         "Logging", _BATCH, minimum=0),
    Flag("keep_no_reasoning", "bool", _run("keep_no_reasoning"),
         "keep samples without reasoning (default: discard them)", "Logging", _BATCH),
    Flag("keep_malformed", "bool", _run("keep_malformed"),
         "keep malformed samples: leaked, invalid, unoffered or duplicate tool calls (default: discard)",
         "Logging", _BATCH),
    Flag("keep_token_drift", "bool", _run("keep_token_drift"),
         "keep samples whose token ids drifted between turns (false: discard them)", "Logging", _BATCH),
    Flag("price_input", "float", _run("price_input"),
         "USD per million prompt tokens (≤ 1e6), to cost calls the provider does not price (usage.cost)",
         "Workers and budgets", _BATCH, shown="none", maximum=MAX_PRICE),
    Flag("price_output", "float", _run("price_output"), "USD per million completion tokens",
         "Workers and budgets", _BATCH, shown="none", maximum=MAX_PRICE),
    Flag("price_cached", "float", _run("price_cached"), "USD per million cached prompt tokens",
         "Workers and budgets", _BATCH, shown="--price_input", maximum=MAX_PRICE),
    Flag("max_cost", "float", _run("max_cost"),
         "USD this invocation may spend, counted per model call: then no call starts, exit 1",
         "Workers and budgets", _BATCH, shown="none"),
    # Samples and verification
    Flag("samples_per_prompt", "int", _run("samples_per_prompt"),
         "attempts at each prompt, each its own sandbox, toolsets, model seed, entry (raise it on --resume)",
         "Samples and verification", _BATCH, minimum=1),
    Flag("verify_command", "str", _verify("verify_command"),
         "shell command run in each prompt's sandbox after its last turn: exit 0 passes; the last "
         "line of its output, a number in [0,1], is the score (a row's verify.command wins)",
         "Samples and verification", _BATCH, shown="none"),
    Flag("verify_timeout", "float", _verify("verify_timeout"),
         "seconds a command check or a --verifier may take", "Samples and verification", _BATCH),
    Flag("answer_match", "str", _verify("answer_match"),
         "how a row's verify.answer is compared with the final answer when it names no match mode",
         "Samples and verification", _BATCH, choices=MATCH_MODES),
    Flag("verifier", "str", _verify("verifier"),
         "module:function, an async Python verifier of each attempt (see docs/verification.md)",
         "Samples and verification", _BATCH, shown="none"),
    Flag("judge_model", "str", _verify("judge_model"),
         "judge each attempt with this model, through the run's endpoint and rate limit",
         "Samples and verification", _BATCH, shown="none"),
    Flag("judge_rubric", "str", _verify("judge_rubric"),
         "file holding the judge's rubric for rows that give none", "Samples and verification", _BATCH,
         shown="none"),
    Flag("keep", "str", _verify("keep"),
         "which attempts go to the output: all, passing (verified), best (of each prompt's samples); "
         "the others go to discarded.jsonl", "Samples and verification", _BATCH, choices=KEEP_MODES),
    Flag("rescore", "bool", _run("rescore"),
         "re-check the run --run_name's entries from their transcripts (answer, judge, python): no agent "
         "call", "Samples and verification", _BATCH),
    # Export and the Hub
    Flag("export", "list", _export("export"),
         "comma list of parquet, openai, sharegpt, rl (token ids: --capture_tokens): files in <run>/export/ "
         "at the end of the run; without --dataset_file, exports the existing run --run_name",
         "Export and the Hub", _BATCH, shown="none"),
    Flag("export_reasoning", "str", _export("export_reasoning"),
         "openai export: reasoning in reasoning_content (field) or as <think> in the content (inline)",
         "Export and the Hub", _BATCH, choices=REASONING_PLACES),
    Flag("push_to_hub", "str", _export("push_to_hub"),
         "Hub dataset org/name: push the exports and a dataset card (token: HF_TOKEN or hf auth login)",
         "Export and the Hub", _BATCH, shown="none"),
    Flag("hub_private", "bool", _export("hub_private"), "create the Hub dataset private",
         "Export and the Hub", _BATCH),
    Flag("hub_license", "str", _export("hub_license"), "the dataset card's license id", "Export and the Hub",
         _BATCH),
    Flag("backend", "str", _run("backend"),
         "where prompts run: local worker processes, or actors on a Ray cluster (pip install -e \".[ray]\")",
         "Workers and budgets", _BATCH, choices=RUN_BACKENDS),
    Flag("ray_address", "str", _run("ray_address"),
         "with --backend=ray: the cluster to join, auto (started here with ray start) or host:port",
         "Workers and budgets", _BATCH),
)  # fmt: skip

BY_NAME = {flag.name: flag for flag in FLAGS}
assert len(BY_NAME) == len(FLAGS), "a flag is declared twice"
assert {flag.group for flag in FLAGS} <= set(GROUPS)


def flags_of(cli: str) -> tuple[Flag, ...]:
    """The flags `cli` accepts, in table order."""
    return tuple(flag for flag in FLAGS if cli in flag.clis)
