"""What run.json may hold: the job's own variables, and never a secret.

The environment is cut down to what the job reads (the profile's variables, and the prefixes of
the libraries a verl job runs: see :data:`JOB_PREFIXES`); every value whose name looks secret is
replaced, in the environment, the command line (``name=value``, ``--flag=value`` and ``--flag
value``) and the Hydra overrides (from the command line and from the script), and so are the
credentials inside any URL (``postgres://user:pw@host``, ``http://user:pw@proxy``), a secret-named query
parameter (``?access_token=…``), a ``Bearer``/``Basic`` credential anywhere, the value of a header
argument of a secret-named header (``-H "Authorization: Bearer …"``), and a secret-named key's value in
any argument shape: a JSON or Python mapping (``--runtime-env-json '{"env_vars": {"WANDB_API_KEY": …}}'``,
its quotes escaped or not) and ``KEY=VALUE`` inside a string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import overload

REDACTED = "<redacted>"

# The prefixes of what a verl job on Ascend or NVIDIA reads. HCCL_, ASCEND_, ACL_: CANN's collectives
# and runtime (HCCL_EXEC_TIMEOUT, ASCEND_RT_VISIBLE_DEVICES); NCCL_, CUDA_: the NVIDIA side; GLOO_:
# torch's CPU collectives (GLOO_SOCKET_IFNAME); PYTORCH_, TORCH_: torch's allocator and distributed
# settings (PYTORCH_NPU_ALLOC_CONF, a rule's subject); RAY_: Ray (RAY_DEDUP_LOGS); VLLM_: the rollout;
# HYDRA_: verl's configuration (HYDRA_FULL_ERROR); HF_: model and data downloads (HF_ENDPOINT); OMP_:
# threads; PYTHON: the interpreter (PYTHONPATH, PYTHONUNBUFFERED). The guide's 3.3 exports are all here.
JOB_PREFIXES = (
    "HCCL_",
    "ASCEND_",
    "ACL_",
    "NCCL_",
    "CUDA_",
    "GLOO_",
    "PYTORCH_",
    "TORCH_",
    "RAY_",
    "VLLM_",
    "HYDRA_",
    "HF_",
    "OMP_",
    "PYTHON",
)
# Whole names a job reads: the loader's path, the command path, torch.distributed's rendezvous.
JOB_NAMES = frozenset(
    {"LD_LIBRARY_PATH", "PATH", "TASK_QUEUE_ENABLE", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"}
)

# A name is secret when one of its words is one of these, or when it ends with one of the endings
# (WANDB_API_KEY, HF_TOKEN, PGPASSWORD, RAY_JOB_HEADERS, which carries an Authorization header), or when it
# holds AUTH anywhere (OAUTH2_PROXY_COOKIE, MY_AUTHKEY). Words, not substrings: PATH holds PAT, and verl's
# max_num_batched_tokens and ppo_max_token_len_per_gpu hold TOKEN, and none of them is a secret.
_SECRET_WORDS = frozenset(
    "SECRET SECRETS PASS PASSWORD PASSWD PASSPHRASE PAT DSN CREDENTIAL CREDENTIALS AUTH AUTHORIZATION "
    "COOKIE APIKEY SIGNATURE SIG".split()
)
_SECRET_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CONNECTION_STRING", "HEADERS")
_WORD = re.compile(r"[^A-Z0-9]+")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_SCHEME_CREDENTIALS = re.compile(r"(?i)\b(Bearer|Basic)(\s+)[A-Za-z0-9._~+/=:-]+")
_QUERY_PARAMETER = re.compile(r"([?&;])([^=&#\s]+)=([^&#\s]*)")
_HEADER = re.compile(r"^(\s*[A-Za-z0-9_-]+\s*:)\s*\S")
# A key, its closing quote (escaped or not), ``:`` or ``=``, then its value: quoted (to the same quote) or a bare
# word. Matched anywhere in an argument, so a mapping's pairs and ``KEY=VALUE`` inside a string are found alike;
# a key starts only where no word goes on before it, so an argument is scanned in linear time.
_PAIR = re.compile(
    r"""(?<![\w./-])(?P<key>-{0,2}[A-Za-z_][\w.-]*)(?P<close>\\?["']?)(?P<sep>\s*[:=]\s*)"""
    r"""(?:(?P<quote>\\?["'])(?P<quoted>.*?)(?P=quote)|(?P<bare>[^"'\\\s,;&{}\[\]]+))"""
)
_PLAIN_NAME = re.compile(r"[\w.+-]+")  # an option or variable name, not a word of JSON (``"--api-key``)
_SCHEMES = frozenset({"bearer", "basic"})  # a credential's scheme: the credential after it is redacted instead


def secret_name(name: str) -> bool:
    """Whether a variable, option or override called ``name`` may hold a secret."""
    upper = name.upper().strip("-+")
    return (
        upper.endswith(_SECRET_ENDINGS) or "AUTH" in upper or any(word in _SECRET_WORDS for word in _WORD.split(upper))
    )


def redact_value(value: str) -> str:
    """``value`` with the secrets inside it replaced: a URL's credentials (``scheme://<redacted>@host``), a
    secret-named query parameter's value, a ``Bearer``/``Basic`` credential, a secret-named header's value."""
    header = _HEADER.match(value)
    if header and secret_name(header.group(1).rstrip(": ")):
        return f"{header.group(1)} {REDACTED}"
    if "://" in value:
        value = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", value)
    if ":" in value or "=" in value:
        value = _PAIR.sub(_redact_pair, value)
    if "=" in value:
        value = _QUERY_PARAMETER.sub(
            lambda m: f"{m[1]}{m[2]}={REDACTED}" if secret_name(m[2]) and m[3] else m[0], value
        )
    return _SCHEME_CREDENTIALS.sub(rf"\1\2{REDACTED}", value)


def _redact_pair(m: re.Match) -> str:
    """A key and its value (:data:`_PAIR`): the value redacted when the key looks secret (quoted as the key is, so
    JSON stays JSON), else a quoted value searched for pairs of its own (``{"cmd": "WANDB_API_KEY=…"}``)."""
    head, quote = m["key"] + m["close"] + m["sep"], m["quote"] or ""
    if not secret_name(m["key"]):
        return head + quote + _PAIR.sub(_redact_pair, m["quoted"]) + quote if quote else m[0]
    if (m["bare"] or "").lower() in _SCHEMES or not (m["quoted"] or m["bare"]):
        return m[0]
    quote = quote or m["close"]
    return f"{head}{quote}{REDACTED}{quote}"


@overload
def redact_variable(name: str, value: str) -> str: ...


@overload
def redact_variable(name: str, value: None) -> None: ...


def redact_variable(name: str, value: str | None) -> str | None:
    """A variable's value as run.json may show it: redacted when its name looks secret, URL credentials out."""
    return value if value is None else REDACTED if secret_name(name) else redact_value(value)


def job_variables(env: Mapping[str, str], own: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``env`` the job reads (``own``: the profile's, plus :data:`JOB_PREFIXES` and
    :data:`JOB_NAMES`), sorted, each secret-looking value redacted."""
    names = set(own)
    return {
        k: redact_variable(k, v)
        for k, v in sorted(env.items())
        if k in names or k in JOB_NAMES or k.startswith(JOB_PREFIXES)
    }


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command with secrets redacted: ``NAME=value`` and ``--flag=value`` of a secret-looking name,
    the argument after such a ``--flag``, URL credentials anywhere, and the same inside an argument
    that is itself a command line (``bash -c "... --password x"``)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if " " in arg.strip():
            out.append(_redact_words(arg))
            continue
        name, sep, _ = arg.partition("=")
        if secret_name(name) and (sep or name.startswith("-")) and _PLAIN_NAME.fullmatch(name):
            out.append(f"{name}={REDACTED}" if sep else arg)
            hide_next = not sep
        else:
            out.append(redact_value(arg))
    return out


def _redact_words(arg: str) -> str:
    """One argument holding spaces: a secret header (``Authorization: Bearer …``, also as ``--header=…``) has its
    value redacted whole; else each word is redacted as an argument of its own (``bash -c "…"``)."""
    flag, sep, rest = arg.partition("=")
    value = rest if sep and flag.startswith("-") else arg
    header = _HEADER.match(value)
    if header and secret_name(header.group(1).rstrip(": ")):
        return f"{flag}={header.group(1)} {REDACTED}" if value is rest else f"{header.group(1)} {REDACTED}"
    return " ".join(redact_argv(redact_value(arg).split(" ")))


def redact_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """Hydra overrides (``key.sub`` → value) with secret-looking keys and URL credentials redacted."""
    return {k: REDACTED if secret_name(k) else redact_value(v) for k, v in overrides.items()}
