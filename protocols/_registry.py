"""Registry of shuffle-model protocols by their public (lower-case survey) name.

A new protocol is a new module that calls :func:`register_protocol`, plus its name in
:data:`BUILTIN_MODULES` (and its public names in ``protocols/__init__.pyi``); nothing in
``esa/`` or ``crypto/`` changes.

``import protocols`` imports none of the protocol modules (a command that only computes a
bound does not pay for forty of them): the registry imports every module of
:data:`BUILTIN_MODULES` the first time it is consulted or extended, so whoever asks, by
whatever path, sees every built-in protocol, and a protocol registered from outside can
never take a built-in's name before the built-in loads.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import overload

from ._base import Calibration, ShuffleProtocol, check_delta, check_epsilon, check_n
from ._errors import BoundNotApplicable, NeedsPositiveDelta, ParameterError

__all__ = [
    "BUILTIN_MODULES",
    "MAX_INTEGER_OPTION",
    "MAX_MESSAGES",
    "ProtocolSpec",
    "RecordedOptions",
    "build_protocol",
    "option_keys",
    "protocol_names",
    "register_protocol",
    "register_wrapper",
]


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """The common knobs every protocol is configured from (the flags of ``esa simulate``).

    Attributes:
        epsilon: target central ε_c against the analyzer (no collusion).
        delta: target δ.
        n: number of users.
        domain: input domain size (histogram bins; 2 for counting; buckets for sums).
        bound: force this amplification bound by name (default: the tightest that applies).
        fake_reports: uniform fake reports EACH shuffler adds (MURS), as
            :class:`esa.PipelineConfig` and ``esa simulate --fake-reports`` count them.
        options: protocol-specific parameters (e.g. ``gamma``, ``precision``).
        shufflers: m >= 1 shufflers that each add ``fake_reports``.
    """

    epsilon: float
    delta: float
    n: int
    domain: int = 2
    bound: str | None = None
    fake_reports: int = 0
    options: Mapping[str, float | str] = field(default_factory=dict)
    shufflers: int = 1

    def __post_init__(self) -> None:
        # Stored as checked (epsilon=1 as 1.0, n=1e3 as 1000), so no factory sees a numpy
        # scalar or an integral float where it expects an int.
        set_field = object.__setattr__
        set_field(self, "epsilon", check_epsilon(self.epsilon))
        # δ = 0 asks for pure DP: each protocol that cannot give it refuses when built.
        set_field(self, "delta", check_delta(self.delta, pure=True))
        set_field(self, "n", check_n(self.n))
        set_field(self, "domain", check_n(self.domain, "domain", 2))
        set_field(self, "fake_reports", check_n(self.fake_reports, "fake_reports", 0))
        set_field(self, "shufflers", check_n(self.shufflers, "shufflers", 1))

    @property
    def total_fake_reports(self) -> int:
        """Fake reports over every shuffler: ``shufflers * fake_reports`` (what the
        protocols' accounting and estimators count)."""
        return self.shufflers * self.fake_reports


Factory = Callable[[ProtocolSpec], ShuffleProtocol]
_PROTOCOLS: dict[str, Factory] = {}

#: The modules that register the built-in protocols and wrapper options on import
#: (``tests/test_registry_lazy.py`` checks that none is missing); what a process pool's
#: fork server imports so that its workers start with them loaded.
BUILTIN_MODULES = (
    "protocols._cnt_2m",
    "protocols._cnt_bn",
    "protocols._cnt_pure",
    "protocols._cnt_sgm",
    "protocols._disele",
    "protocols._fragmenting",
    "protocols._hist_mm",
    "protocols._krr",
    "protocols._prhr",
    "protocols._prrq",
    "protocols._rsum",
    "protocols._rsum_dsg",
    "protocols._rsum_pure",
    "protocols._slh",
    "protocols._uniformity",
)

_builtins_loaded = False


def _load_builtins() -> None:
    """Import :data:`BUILTIN_MODULES` (once; later calls return at once).

    No lock of ours: two threads that get here together import the same modules, and the
    import system makes each wait until a module another thread is importing is complete.
    The built-in modules never come here (:func:`_is_builtin`), so an import in progress
    never starts the others from within itself.
    """
    global _builtins_loaded
    if _builtins_loaded:
        return
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    _builtins_loaded = True


def _is_builtin(function: Callable[..., object]) -> bool:
    """Whether ``function`` is defined in one of :data:`BUILTIN_MODULES`."""
    return getattr(function, "__module__", None) in BUILTIN_MODULES


#: Largest value an integer option takes: options arrive as floats (``--option k=v``, JSON),
#: and 2^53 is the last integer from which every smaller one is an exact double.
MAX_INTEGER_OPTION = 1 << 53

#: Most messages (n · messages_per_user + fake_reports) a protocol is configured for. Rows
#: stop far below (``esa simulate`` checks its own budget); a tally is drawn per distinct
#: message, PUCM's in closed form, and the full experiment grid tallies PUCM at
#: 3.7·10^12 messages (d = 1024). 10^14 keeps that with room and refuses what no machine
#: runs: PRHR at ε = 10^-6 (10^15 messages per user), a share count of 10^300.
MAX_MESSAGES = 10**14


def number_option(spec: ProtocolSpec, key: str, default: float) -> float:
    """``spec.options[key]`` (or ``default``), which must be a finite number."""
    value = spec.options.get(key, default)
    if isinstance(value, (str, bytes, bool)):
        raise ParameterError(f"option {key} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"option {key} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ParameterError(f"option {key} must be a finite number, got {value!r}")
    return number


@overload
def integer_option(
    spec: ProtocolSpec,
    key: str,
    default: int,
    *,
    minimum: int = 0,
    maximum: int = MAX_INTEGER_OPTION,
) -> int: ...
@overload
def integer_option(
    spec: ProtocolSpec,
    key: str,
    default: None = None,
    *,
    minimum: int = 0,
    maximum: int = MAX_INTEGER_OPTION,
) -> int | None: ...
def integer_option(
    spec: ProtocolSpec,
    key: str,
    default: int | None = None,
    *,
    minimum: int = 0,
    maximum: int = MAX_INTEGER_OPTION,
) -> int | None:
    """``spec.options[key]`` (or ``default``), which must be an integer in [``minimum``,
    ``maximum``]: a count or a seed is refused as given (3.5, -1, nan, 1e300), not truncated
    or passed on to fail later."""
    value = spec.options.get(key)
    if value is None:
        return default
    try:
        number = number_option(spec, key, 0.0)
    except ParameterError:  # a string, a bool, NaN, ±inf: refused below
        number = math.nan
    if number.is_integer() and minimum <= number <= maximum:
        return int(value)
    shown = f"{value:g}" if isinstance(value, float) else repr(value)
    if number.is_integer() and number > maximum:
        raise ParameterError(f"option {key} must be an integer <= {maximum}, got {shown}")
    raise ParameterError(f"option {key} must be an integer >= {minimum}, got {shown}")


def register_protocol(name: str) -> Callable[[Factory], Factory]:
    """Decorator registering ``factory(spec) -> ShuffleProtocol`` under ``name``.

    Args:
        name: the new protocol's name.

    Returns:
        The decorator; it returns the factory unchanged.

    Raises:
        ParameterError: (when the decorator is applied) the name is already registered.
    """

    def deco(factory: Factory) -> Factory:
        if not _is_builtin(factory):  # a built-in's name is taken before anyone else's
            _load_builtins()
        if name in _PROTOCOLS:
            raise ParameterError(f"protocol {name!r} is already registered")
        _PROTOCOLS[name] = factory
        return factory

    return deco


#: ``wrap(protocol, spec) -> ShuffleProtocol``: a configured protocol, wrapped by an option.
Wrap = Callable[[ShuffleProtocol, ProtocolSpec], ShuffleProtocol]


@dataclass(frozen=True, slots=True)
class _Wrapper:
    option: str
    wrap: Wrap
    applies_to: Callable[[ShuffleProtocol], bool]


_WRAPPERS: dict[str, _Wrapper] = {}


def register_wrapper(
    option: str, wrap: Wrap, *, applies_to: Callable[[ShuffleProtocol], bool]
) -> None:
    """Register an option that wraps any protocol it applies to (e.g. ``report_fragments``).

    :func:`build_protocol` configures the named protocol as usual, then, where ``option`` is
    among the spec's options, returns ``wrap(protocol, spec)`` instead; :func:`option_keys`
    lists ``option`` for the protocols ``applies_to`` accepts. ``wrap`` refuses (with
    :class:`ParameterError`) a protocol it cannot wrap.

    Args:
        option: the option's name in ``ProtocolSpec.options``.
        wrap: ``wrap(protocol, spec)`` returns the wrapped protocol.
        applies_to: whether the option applies to a protocol.

    Raises:
        ParameterError: ``option`` is already registered.
    """
    if not _is_builtin(wrap):
        _load_builtins()
    if option in _WRAPPERS:
        raise ParameterError(f"wrapper option {option!r} is already registered")
    _WRAPPERS[option] = _Wrapper(option, wrap, applies_to)


def protocol_names() -> list[str]:
    """Names of every registered protocol, sorted.

    Returns:
        The names :func:`build_protocol` accepts.
    """
    _load_builtins()
    return sorted(_PROTOCOLS)


def build_protocol(name: str, spec: ProtocolSpec) -> ShuffleProtocol:
    """Configure protocol ``name`` from ``spec``.

    A ``spec.delta`` of 0 asks for pure DP: a protocol whose guarantee is approximate
    refuses it with :class:`NeedsPositiveDelta` naming the protocol.

    Args:
        name: a registered protocol (:func:`protocol_names`).
        spec: the target privacy, the number of users, the domain and the options.

    Returns:
        The configured protocol, calibrated for ``spec``.

    Raises:
        NeedsPositiveDelta: δ = 0 for a protocol that does not prove pure DP.
        ParameterError: unknown name or option, parameters outside the protocol's valid
            range, or more messages than one machine can create.
        BoundNotApplicable: ``spec.bound`` is forced on a protocol that no amplification
            bound accounts.

    Example:
        A 4-bin histogram of 10 000 users at (ε, δ) = (1, 10⁻⁶), with k-ary randomized
        response:

        >>> from protocols import ProtocolSpec, build_protocol
        >>> spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=10_000, domain=4)
        >>> protocol = build_protocol("hist_kr", spec)
        >>> protocol.name, protocol.privacy.epsilon_central <= 1.0
        ('hist_kr', True)
    """
    _load_builtins()
    try:
        factory = _PROTOCOLS[name]
    except KeyError:
        raise ParameterError(
            f"unknown protocol {name!r}; choose one of: {', '.join(protocol_names())}"
        ) from None
    read = spec.options if isinstance(spec.options, RecordedOptions) else None
    if read is None:
        read = RecordedOptions(spec.options)
        spec = dataclasses.replace(spec, options=read)
    wrappers = [w for w in _WRAPPERS.values() if w.option in spec.options]
    try:
        protocol = factory(spec)
    except NeedsPositiveDelta as exc:  # δ = 0 asked of an approximate-DP protocol
        raise NeedsPositiveDelta(f"{name} needs delta > 0: {exc.why}", exc.why) from None
    if spec.delta == 0.0 and protocol.privacy.delta != 0.0:
        why = f"it states delta = {protocol.privacy.delta:g} ({protocol.privacy.bound})"
        raise NeedsPositiveDelta(f"{name} needs delta > 0: {why}", why)
    for wrapper in wrappers:
        protocol = wrapper.wrap(protocol, spec)
    if spec.bound is not None and spec.bound not in protocol.privacy.bound:
        # The factory configured itself without the amplification bounds (its paper's own
        # accountant, or an exact one): the forced bound would be silently ignored.
        raise BoundNotApplicable(
            f"{name} is not accounted by an amplification bound but by its own theorem or "
            f"accountant ({protocol.privacy.bound}); bound={spec.bound!r} does not apply"
        )
    unknown = sorted(set(read) - read.asked)
    if unknown:
        known = option_keys(protocol, read)
        raise ParameterError(
            f"{name}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            + (f"{name} reads: {', '.join(known)}" if known else f"{name} takes no options")
        )
    total = protocol.messages_per_user * spec.n + spec.total_fake_reports
    if not total <= MAX_MESSAGES:
        raise ParameterError(
            f"{name}: n * messages_per_user + fake_reports = {spec.n} * "
            f"{protocol.messages_per_user:.4g} + {spec.total_fake_reports} = {total:.3g} "
            f"messages, over the {MAX_MESSAGES:.0e} any run can create or tally on one machine"
        )
    protocol.record_calibration(Calibration(spec.n, spec.total_fake_reports, spec.shufflers))
    return protocol


def option_keys(protocol: ShuffleProtocol, read: RecordedOptions) -> list[str]:
    """The ``options`` keys a protocol built with ``read`` takes: those its factory asked
    for, then each wrapper option (``report_fragments``) that applies to it, last.

    Args:
        protocol: the built protocol.
        read: the options its factory read (:func:`build_protocol`'s record of them).

    Returns:
        The option keys.
    """
    _load_builtins()
    keys = sorted(read.asked - set(_WRAPPERS))
    keys += [w.option for w in _WRAPPERS.values() if w.applies_to(protocol)]
    return keys


class RecordedOptions(Mapping[str, "float | str"]):
    """Options that record every key a protocol's factory asks for (present or not).

    :func:`build_protocol` wraps a spec's options in one, so that a misspelt option is
    refused instead of silently ignored; pass one in to learn which options a protocol
    reads (``esa protocols`` lists them)."""

    def __init__(self, options: Mapping[str, float | str]) -> None:
        self._options = dict(options)
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> float | str:
        self.asked.add(key)
        return self._options[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.asked.add(key)
        return key in self._options

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)
