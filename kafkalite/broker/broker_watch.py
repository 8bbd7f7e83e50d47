"""Watches on broker processes (issue 13): evidence that a process is gone, long before
its ZooKeeper session expires. Verdicts come from kafkalite.core.process_watch; this module
only connects and pings.

- The controller watches every live broker (ProcessWatches) and fails one found gone.
- Every broker watches its peers too (ProcessWatches), and until the controller's update
  arrives answers Metadata as if a peer found gone had departed (MetadataCache.mark_gone):
  a client that asks right after a leader died is told "leader not available" and asks
  again soon, rather than waiting on the dead leader until its next periodic refresh.
- Every other broker watches the controller (ControllerWatch) and, when its process is
  gone, removes /controller for it, so a new controller is elected at once.

One task per watched registration (broker id, epoch): it pings the broker's inter-broker
address, then waits until that connection ends; it connects and pings again at once. A
verdict of GONE calls `on_gone(broker_id, epoch)` once; pinging goes on. Every answer as
that registration's process on a new connection calls `on_back(broker_id, epoch)`, the
first one too, not only one after this watch's own GONE: whoever counts the registration
gone may know it from other evidence (a new controller starts from its broker's metadata
cache, issue 13), and a watch made after that never sees a GONE of its own. The callee
ignores it for a registration it does not count gone. While that connection stands,
`answering` is true: a caller whose "back" could not be acted on (ZooKeeper failed) asks
the watch again rather than wait for a transition that will not come. Every connection
attempt and ping is bounded by PING_TIMEOUT_MS, and attempts after a failure are paced by
RETRY_S, so a watch costs nothing while the broker is healthy and little while it is not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from kafkalite.aio import cancel_and_wait, spawn
from kafkalite.core.process_watch import PingAnswer, ProcessWatchState, Verdict
from kafkalite.rpc.transport import RpcClient, RpcConnectRefused, RpcError
from kafkalite.zk.errors import ZkError

log = logging.getLogger(__name__)

PING_TIMEOUT_MS = 2000
RETRY_S = 0.2


class ProcessWatch:
    def __init__(self, broker_id: int, epoch: int, host: str, port: int, *, sender: int,
                 on_gone: Callable[[int, int], None], on_back: Callable[[int, int], None], secret: bytes | None = None) -> None:
        self.state = ProcessWatchState(broker_id, epoch)
        self.address = (host, port)
        self._dropped = asyncio.Event()
        # Set while a verdict stands (connected and answered as this process, or gone); clear
        # from the moment the connection ends until the next verdict.
        self.settled = asyncio.Event()
        # True while the process answered as this registration on the connection now open
        # (a standing ALIVE verdict); false from the moment that connection ends.
        self.answering = False
        self._client = RpcClient(host, port, sender=sender, on_drop=self._on_drop, secret=secret)
        self._on_gone = on_gone
        self._on_back = on_back
        self._tasks: set[asyncio.Task] = set()
        spawn(self._run(), name=f"process-watch-{broker_id}", owner=self._tasks)

    def connection_closed(self) -> bool:
        """Whether the kernel already knows the watched connection closed (RpcClient.peer_closed)."""
        return self._client.peer_closed()

    def _on_drop(self) -> None:
        self.answering = False
        self.settled.clear()
        self._dropped.set()

    async def _ping(self) -> PingAnswer | str:
        try:
            header, _ = await self._client.call("Ping", {}, timeout_ms=PING_TIMEOUT_MS)
        except RpcConnectRefused:
            return "refused"
        except RpcError as e:
            return str(e)
        if header.get("error", 0) != 0:  # an old broker without Ping: no verdict, ever
            return f"error {header.get('error')}"
        return PingAnswer(int(header["broker_id"]), int(header["broker_epoch"]), str(header["incarnation"]))

    async def _run(self) -> None:
        st = self.state
        gone = False
        while True:
            self._dropped.clear()
            outcome = await self._ping()
            verdict = st.judge(outcome)
            self.answering = verdict is Verdict.ALIVE and not self._dropped.is_set()
            if verdict is Verdict.GONE and not gone:
                gone = True
                log.info("broker %d (epoch %d) at %s:%d is gone: %s", st.broker_id, st.epoch, *self.address,
                         outcome if isinstance(outcome, str) else f"answered by {outcome}")
                self._on_gone(st.broker_id, st.epoch)
            elif verdict is Verdict.ALIVE:
                if gone:
                    gone = False
                    log.info("broker %d (epoch %d) answers again", st.broker_id, st.epoch)
                # Not only after our own GONE: the caller may count it gone on other
                # evidence (see the module docstring), and ignores it otherwise.
                self._on_back(st.broker_id, st.epoch)
            if verdict is not Verdict.UNKNOWN or gone:
                self.settled.set()
            if verdict is Verdict.ALIVE:
                await self._dropped.wait()  # connected and healthy: nothing to do until it ends
            else:
                await asyncio.sleep(RETRY_S)

    async def close(self) -> None:
        await cancel_and_wait(list(self._tasks))
        await self._client.close()


class ProcessWatches:
    """The watches of the controller: one per live registration but its own."""

    def __init__(self, own_id: int, on_gone: Callable[[int, int], None], on_back: Callable[[int, int], None],
                 secret: bytes | None = None) -> None:
        self.own_id = own_id
        self.secret = secret  # the inter-broker RPC secret (kafkalite.rpc.auth), None: off
        self.on_gone = on_gone
        self.on_back = on_back
        self.watches: dict[int, ProcessWatch] = {}
        self._closing: set[asyncio.Task] = set()

    def follow(self, live: Mapping[int, tuple[int, str, int]], gone: Mapping[int, int]) -> None:
        """Watch the `live` registrations (broker -> (epoch, host, inter-broker port)) at
        their address, and the `gone` ones (broker -> epoch) where they were watched, to
        hear if they answer again."""
        wanted = dict(live)
        for bid, epoch in gone.items():
            watch = self.watches.get(bid)
            if watch is not None and watch.state.epoch == epoch:
                wanted[bid] = (epoch, *watch.address)
        self.sync(wanted)

    def sync(self, registrations: dict[int, tuple[int, str, int]]) -> None:
        """Watch exactly these registrations: broker -> (epoch, host, inter-broker port)."""
        for bid, watch in list(self.watches.items()):
            wanted = registrations.get(bid)
            if wanted is None or (wanted[0], wanted[1], wanted[2]) != (watch.state.epoch, *watch.address):
                del self.watches[bid]
                spawn(watch.close(), name=f"close-process-watch-{bid}", owner=self._closing)
        for bid, (epoch, host, port) in registrations.items():
            if bid != self.own_id and bid not in self.watches:
                self.watches[bid] = ProcessWatch(bid, epoch, host, port, sender=self.own_id, on_gone=self.on_gone,
                                                 on_back=self.on_back, secret=self.secret)

    async def settled(self, broker_ids: Iterable[int], timeout_s: float) -> None:
        """Until every watch of these brokers whose connection just ended has its verdict
        again (bounded): a Metadata answer waits for it rather than name a dead leader."""
        watches = [w for b in broker_ids if (w := self.watches.get(b)) is not None]
        for w in watches:  # the kernel may know of a closed connection before the read loop does
            if w.settled.is_set() and w.state.incarnation is not None and w.connection_closed():
                w.settled.clear()
        pending = [w.settled.wait() for w in watches if not w.settled.is_set()]
        if pending:
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.gather(*pending)
            except TimeoutError:
                pass

    async def close(self) -> None:
        for watch in list(self.watches.values()):
            await watch.close()
        self.watches.clear()
        await asyncio.gather(*list(self._closing), return_exceptions=True)


class ControllerWatch:
    """A broker's watch on the controller's process: when it is gone, /controller is
    removed (ZkAdapter.remove_gone_controller: only if it still names that registration's
    session), and the brokers elect a new controller without waiting for the session."""

    def __init__(self, own_id: int, read_registration: Callable[[int], Awaitable[tuple[int, str, int] | None]],
                 remove_controller: Callable[[int, int], Awaitable[bool]], secret: bytes | None = None) -> None:
        self.own_id = own_id
        self.secret = secret  # the inter-broker RPC secret (kafkalite.rpc.auth), None: off
        self._read_registration = read_registration  # broker -> (epoch, host, inter-broker port)
        self._remove_controller = remove_controller
        self.watch: ProcessWatch | None = None
        self._follows = 0  # follow() calls so far: only the latest one's registration read is used
        self._tasks: set[asyncio.Task] = set()

    def follow(self, controller_id: int | None) -> None:
        """/controller now names `controller_id` (None: nobody). Its registration is read
        again even when the watch is on that broker already: the same broker may hold
        /controller under a new registration (its session expired, it registered and won
        again, and our data watch saw only the new /controller). A watch of its previous
        epoch would ask to remove /controller for that registration, which
        remove_gone_controller refuses: no early failover when that controller dies."""
        self._follows += 1
        if self.watch is not None and self.watch.state.broker_id != controller_id:
            self._drop()
        if controller_id is not None and controller_id != self.own_id:
            spawn(self._start(controller_id, self._follows), name=f"controller-watch-{controller_id}", owner=self._tasks)

    def _drop(self) -> None:
        if self.watch is not None:
            spawn(self.watch.close(), name="close-controller-watch", owner=self._tasks)
            self.watch = None

    async def _start(self, controller_id: int, follow: int) -> None:
        found = await self._read_registration(controller_id)
        if follow != self._follows:
            return  # /controller moved meanwhile (a read for an earlier owner may end last): a later read decides
        if found is None:  # no registration: nothing that remove_gone_controller would act on
            self._drop()
            return
        epoch, host, port = found
        watch = self.watch
        if watch is not None and (watch.state.broker_id, watch.state.epoch, *watch.address) == (controller_id, epoch, host, port):
            return
        self._drop()
        self.watch = ProcessWatch(controller_id, epoch, host, port, sender=self.own_id, on_gone=self._gone,
                                  on_back=lambda b, e: None, secret=self.secret)

    def _gone(self, broker_id: int, epoch: int) -> None:
        spawn(self._remove(broker_id, epoch), name="remove-gone-controller", owner=self._tasks)

    async def _remove(self, broker_id: int, epoch: int) -> None:
        try:
            removed = await self._remove_controller(broker_id, epoch)
        except ZkError as e:  # ZooKeeper trouble: the session expiry will do it
            log.info("could not remove /controller of gone broker %d: %s", broker_id, e)
            return
        if removed:
            log.warning("controller %d (epoch %d) is gone: removed /controller, electing a new one", broker_id, epoch)

    async def close(self) -> None:
        watch, self.watch = self.watch, None
        await cancel_and_wait(list(self._tasks))
        if watch is not None:
            await watch.close()
