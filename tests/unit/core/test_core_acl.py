"""The authorizer's decision (kafkalite.core.acl): Kafka's AclAuthorizer rules, with many
principals, hosts and patterns."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.acl import (
    CLUSTER_NAME,
    IMPLIED_BY,
    OPERATION_NAMES,
    AccessControlEntry,
    AclBinding,
    AclCache,
    AclFilter,
    AuthorizerConfig,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    authorize,
    authorize_any_topic_write,
    parse_super_users,
    validate_binding,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
O = Operation  # noqa: E741
CONCRETE_OPS = [o for o in OPERATION_NAMES if o != O.ALL]
STRICT = AuthorizerConfig()


def cache_of(*acls: tuple[ResourcePattern, AccessControlEntry]) -> AclCache:
    cache = AclCache()
    by: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for p, e in acls:
        by.setdefault(p, set()).add(e)
    cache.replace_all(by)
    return cache


def acl(rt, name, pt, principal, op, perm, host="*"):
    return ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm)


def test_allow_read_lets_alice_read_and_describe_but_not_write():
    cache = cache_of(acl(T, "orders", LIT, "User:alice", O.READ, ALLOW))
    assert authorize(cache, STRICT, "User:alice", "10.0.0.1", O.READ, T, "orders")
    assert authorize(cache, STRICT, "User:alice", "10.0.0.1", O.DESCRIBE, T, "orders")  # Read implies Describe
    assert not authorize(cache, STRICT, "User:alice", "10.0.0.1", O.WRITE, T, "orders")
    assert not authorize(cache, STRICT, "User:bob", "10.0.0.1", O.READ, T, "orders")
    assert not authorize(cache, STRICT, "User:alice", "10.0.0.1", O.READ, T, "payments")


def test_no_acl_found_follows_allow_everyone_setting():
    cache = cache_of(acl(T, "orders", LIT, "User:alice", O.READ, ALLOW))
    lax = AuthorizerConfig(allow_everyone_if_no_acl_found=True)
    assert not authorize(cache, STRICT, "User:bob", "h", O.WRITE, T, "other")
    assert authorize(cache, lax, "User:bob", "h", O.WRITE, T, "other")
    # a resource with ACLs, none for bob: refused even with the lax setting
    assert not authorize(cache, lax, "User:bob", "h", O.WRITE, T, "orders")


def test_super_user_beats_deny():
    cache = cache_of(acl(T, "*", LIT, "User:*", O.ALL, DENY))
    cfg = AuthorizerConfig(super_users=parse_super_users(" User:admin ; User:CN=broker,O=x;"))
    assert cfg.super_users == {"User:admin", "User:CN=broker,O=x"}
    assert authorize(cache, cfg, "User:admin", "h", O.DELETE, T, "t")
    assert authorize(cache, cfg, "User:CN=broker,O=x", "h", O.CLUSTER_ACTION, C, CLUSTER_NAME)
    assert not authorize(cache, cfg, "User:alice", "h", O.DELETE, T, "t")


def test_prefixed_pattern_matches_names_that_start_with_it_only():
    cache = cache_of(acl(T, "sales-", PRE, "User:alice", O.WRITE, ALLOW))
    assert authorize(cache, STRICT, "User:alice", "h", O.WRITE, T, "sales-eu")
    assert authorize(cache, STRICT, "User:alice", "h", O.WRITE, T, "sales-")
    assert not authorize(cache, STRICT, "User:alice", "h", O.WRITE, T, "sales")
    assert not authorize(cache, STRICT, "User:alice", "h", O.WRITE, T, "presales-eu")
    assert not authorize(cache, STRICT, "User:alice", "h", O.WRITE, G, "sales-eu")  # another resource type


def test_host_and_wildcard_principal():
    cache = cache_of(acl(G, "g", LIT, "User:*", O.READ, ALLOW, host="10.0.0.5"))
    assert authorize(cache, STRICT, "User:anyone", "10.0.0.5", O.READ, G, "g")
    assert not authorize(cache, STRICT, "User:anyone", "10.0.0.6", O.READ, G, "g")


def test_implications_are_kafkas():
    for implier in (O.READ, O.WRITE, O.DELETE, O.ALTER):
        cache = cache_of(acl(T, "t", LIT, "User:a", implier, ALLOW))
        assert authorize(cache, STRICT, "User:a", "h", O.DESCRIBE, T, "t")
    cache = cache_of(acl(T, "t", LIT, "User:a", O.ALTER_CONFIGS, ALLOW))
    assert authorize(cache, STRICT, "User:a", "h", O.DESCRIBE_CONFIGS, T, "t")
    assert not authorize(cache, STRICT, "User:a", "h", O.ALTER, T, "t")
    cache = cache_of(acl(T, "t", LIT, "User:a", O.CREATE, ALLOW))
    assert not authorize(cache, STRICT, "User:a", "h", O.DESCRIBE, T, "t")  # Create implies nothing
    # Deny implies nothing: denying Read does not deny Describe granted by Write
    cache = cache_of(acl(T, "t", LIT, "User:a", O.WRITE, ALLOW), acl(T, "t", LIT, "User:a", O.READ, DENY))
    assert authorize(cache, STRICT, "User:a", "h", O.DESCRIBE, T, "t")
    assert not authorize(cache, STRICT, "User:a", "h", O.READ, T, "t")


def test_idempotent_write_by_any_topic_write():
    cache = cache_of(acl(T, "orders", LIT, "User:a", O.WRITE, ALLOW))
    assert authorize_any_topic_write(cache, STRICT, "User:a", "h")
    assert not authorize_any_topic_write(cache, STRICT, "User:b", "h")
    denied = cache_of(acl(T, "orders", LIT, "User:a", O.WRITE, ALLOW), acl(T, "*", LIT, "User:a", O.WRITE, DENY))
    assert not authorize_any_topic_write(denied, STRICT, "User:a", "h")
    assert not authorize_any_topic_write(AclCache(), STRICT, "User:a", "h")
    assert authorize_any_topic_write(AclCache(), AuthorizerConfig(allow_everyone_if_no_acl_found=True), "User:a", "h")


EVERYONE = AuthorizerConfig(allow_everyone_if_no_acl_found=True)
A = "User:a"


@pytest.mark.parametrize("acls, config, expected", [
    # a PREFIXED Deny cancels every Allow whose name it prefixes, LITERAL or PREFIXED
    ([(T, "app-orders", LIT, A, ALLOW), (T, "app-", PRE, A, DENY)], STRICT, False),
    ([(T, "app-", PRE, A, ALLOW), (T, "app", PRE, A, DENY)], STRICT, False),
    ([(T, "app-", PRE, A, ALLOW), (T, "app-x", PRE, A, DENY)], STRICT, True),  # app-y is still writable
    ([(T, "app-orders", LIT, A, ALLOW), (T, "app-", PRE, A, DENY), (T, "other", LIT, A, ALLOW)], STRICT, True),
    # a LITERAL Deny cancels only the LITERAL Allow of its name
    ([(T, "t", LIT, A, ALLOW), (T, "t", LIT, A, DENY)], STRICT, False),
    ([(T, "t", PRE, A, ALLOW), (T, "t", LIT, A, DENY)], STRICT, True),
    ([(T, "*", LIT, A, ALLOW), (T, "x", PRE, A, DENY)], STRICT, True),
    ([(T, "t", LIT, A, ALLOW), (T, "*", LIT, "User:*", DENY)], STRICT, False),
    # only this principal's (or User:*'s) ACLs count, and only Write or All
    ([(T, "t", LIT, "User:*", ALLOW)], STRICT, True),
    ([(T, "t", LIT, "User:b", ALLOW)], STRICT, False),
    ([(T, "t", LIT, A, ALLOW), (T, "t", PRE, "User:b", DENY)], STRICT, True),
    ([(G, "t", LIT, A, ALLOW)], STRICT, False),
    # allow.everyone.if.no.acl.found: anyone may, unless a Deny of "*" applies to them
    ([(T, "orders", LIT, "User:b", ALLOW)], EVERYONE, True),
    ([(T, "*", LIT, "User:b", ALLOW)], EVERYONE, True),
    ([(T, "*", LIT, A, DENY)], EVERYONE, False),
    ([(T, "app-", PRE, A, DENY)], EVERYONE, True),
])
def test_any_topic_write_is_kafkas_acl_authorizer_authorize_by_resource_type(acls, config, expected):
    cache = cache_of(*(acl(rt, name, pt, principal, O.WRITE if rt == T else O.READ, perm) for rt, name, pt, principal, perm in acls))
    assert authorize_any_topic_write(cache, config, A, "h") is expected


def test_any_topic_write_counts_all_and_the_host_and_super_users_always_may():
    cache = cache_of(acl(T, "t", LIT, A, O.ALL, ALLOW), acl(T, "t", PRE, A, O.WRITE, DENY, host="other"))
    assert authorize_any_topic_write(cache, STRICT, A, "h")
    assert not authorize_any_topic_write(cache, STRICT, A, "other")
    assert not authorize_any_topic_write(cache_of(acl(T, "t", LIT, A, O.READ, ALLOW)), STRICT, A, "h")
    denied = cache_of(acl(T, "*", LIT, "User:*", O.ALL, DENY))
    assert authorize_any_topic_write(denied, AuthorizerConfig(super_users=frozenset({A})), A, "h")


@pytest.mark.parametrize("binding, why", [
    (acl(ResourceType.ANY, "t", LIT, "User:a", O.READ, ALLOW), "resource type"),
    (acl(T, "t", PatternType.MATCH, "User:a", O.READ, ALLOW), "pattern type"),
    (acl(T, "*", PRE, "User:a", O.READ, ALLOW), "PREFIXED"),
    (acl(C, "other", LIT, "User:a", O.ALTER, ALLOW), "kafka-cluster"),
    (acl(T, "t", LIT, "alice", O.READ, ALLOW), "Type:name"),
    (acl(T, "t", LIT, "User:a", O.ANY, ALLOW), "operation"),
    (acl(T, "t", LIT, "User:a", O.READ, Permission.ANY), "permission"),
    (acl(T, "", LIT, "User:a", O.READ, ALLOW), "empty"),
    (acl(T, "a/b", LIT, "User:a", O.READ, ALLOW), "'/'"),
    (acl(T, "t", LIT, "User:a", O.READ, ALLOW, host=""), "host"),
])
def test_invalid_bindings_are_refused_with_a_reason(binding, why):
    with pytest.raises(InvalidAclError, match=why):
        validate_binding(AclBinding(*binding))


def test_filters_any_match_literal_prefixed():
    stored = [AclBinding(*a) for a in (acl(T, "sales-eu", LIT, "User:a", O.READ, ALLOW), acl(T, "sales-", PRE, "User:b", O.WRITE, ALLOW),
                                       acl(T, "*", LIT, "User:c", O.READ, DENY), acl(G, "sales-eu", LIT, "User:a", O.READ, ALLOW))]

    def names(f: AclFilter) -> set[tuple[str, str]]:
        return {(b.pattern.name, b.entry.principal) for b in stored if f.matches(b)}

    assert names(AclFilter()) == {("sales-eu", "User:a"), ("sales-", "User:b"), ("*", "User:c")}
    assert names(AclFilter(resource_type=T, name="sales-eu", pattern_type=PatternType.MATCH)) == {
        ("sales-eu", "User:a"), ("sales-", "User:b"), ("*", "User:c")}
    assert names(AclFilter(resource_type=T, name="sales-eu", pattern_type=PatternType.ANY)) == {("sales-eu", "User:a")}
    assert names(AclFilter(resource_type=T, pattern_type=PRE)) == {("sales-", "User:b")}
    assert names(AclFilter(resource_type=T, permission=DENY)) == {("*", "User:c")}
    assert names(AclFilter(principal="User:a", operation=O.READ)) == {("sales-eu", "User:a")}
    with pytest.raises(InvalidAclError):
        AclFilter(operation=O.UNKNOWN).validate()


# -- properties ---------------------------------------------------------------------------
principals = st.sampled_from(["User:alice", "User:bob", "User:CN=c1,O=acme", "User:ANONYMOUS"])
hosts = st.sampled_from(["127.0.0.1", "10.0.0.2"])
names = st.text(alphabet="ab-", min_size=1, max_size=4)
ops = st.sampled_from(list(OPERATION_NAMES))
entries = st.builds(AccessControlEntry, st.one_of(principals, st.just("User:*")), st.one_of(hosts, st.just("*")), ops,
                    st.sampled_from([ALLOW, DENY]))
patterns = st.builds(ResourcePattern, st.sampled_from([T, G]), st.one_of(names, st.just("*")), st.sampled_from([LIT, PRE])).filter(
    lambda p: not (p.pattern_type == PRE and p.name == "*"))
acl_sets = st.lists(st.tuples(patterns, entries), max_size=12)


def reference(acls, principal, host, op, rt, name, cfg):
    """The rules written out directly over the list, no cache: the oracle."""
    if principal in cfg.super_users:
        return True
    matching = [e for p, e in acls if p.matches(rt, name)]
    if not matching:
        return cfg.allow_everyone_if_no_acl_found

    def applies(e, perm, allowed_ops):
        return (e.permission == perm and e.principal in (principal, "User:*") and e.host in (host, "*")
                and (e.operation == O.ALL or e.operation in allowed_ops))

    if any(applies(e, DENY, {op}) for e in matching):
        return False
    return any(applies(e, ALLOW, IMPLIED_BY.get(op, {op})) for e in matching)


@settings(max_examples=300, deadline=None)
@given(acl_sets, principals, hosts, st.sampled_from(CONCRETE_OPS), st.sampled_from([T, G]), names, st.booleans())
def test_authorize_agrees_with_the_rules_written_out(acls, principal, host, op, rt, name, lax):
    cfg = AuthorizerConfig(allow_everyone_if_no_acl_found=lax)
    assert authorize(cache_of(*acls), cfg, principal, host, op, rt, name) == reference(acls, principal, host, op, rt, name, cfg)


@settings(max_examples=200, deadline=None)
@given(acl_sets, principals, hosts, st.sampled_from(CONCRETE_OPS), st.sampled_from([T, G]), names, st.sampled_from([LIT, PRE]),
       st.booleans())
def test_a_matching_deny_beats_any_allow(acls, principal, host, op, rt, name, deny_pattern_type, lax):
    """Adding a Deny that covers the request refuses it, whatever else is allowed (a
    literal Deny of the name, or a prefixed Deny of a prefix of it)."""
    deny_name = name if deny_pattern_type == LIT else name[:1]
    deny = (ResourcePattern(rt, deny_name, deny_pattern_type), AccessControlEntry(principal, host, op, DENY))
    everything = [(ResourcePattern(rt, "*", LIT), AccessControlEntry("User:*", "*", O.ALL, ALLOW))]
    cfg = AuthorizerConfig(allow_everyone_if_no_acl_found=lax)
    assert not authorize(cache_of(*acls, *everything, deny), cfg, principal, host, op, rt, name)


@settings(max_examples=200, deadline=None)
@given(acl_sets, principals, hosts, st.sampled_from(CONCRETE_OPS), st.sampled_from([T, G]), names)
def test_an_allow_of_all_on_a_prefix_allows_every_undenied_operation(acls, principal, host, op, rt, name):
    acls = [(p, e) for p, e in acls if e.permission == ALLOW]
    allow = (ResourcePattern(rt, name[:1], PRE), AccessControlEntry(principal, host, O.ALL, ALLOW))
    assert authorize(cache_of(*acls, allow), STRICT, principal, host, op, rt, name)


def test_remembered_decisions_are_forgotten_when_an_acl_changes_or_the_memo_is_full():
    cache = AclCache(decisions_max=2)
    pattern = ResourcePattern(T, "t", LIT)
    assert not authorize(cache, STRICT, "User:a", "h", O.READ, T, "t")
    cache.set(pattern, {AccessControlEntry("User:a", "*", O.READ, ALLOW)})
    assert authorize(cache, STRICT, "User:a", "h", O.READ, T, "t")
    cache.set(pattern, {AccessControlEntry("User:a", "*", O.READ, DENY)})
    assert not authorize(cache, STRICT, "User:a", "h", O.READ, T, "t")
    for name in ("u", "v", "w"):
        authorize(cache, STRICT, "User:a", "h", O.READ, T, name)
    assert len(cache.decisions) <= 2
