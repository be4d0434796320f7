"""Pub/Sub at the pipeline's edges: message attributes, and a local run that stops cleanly.

**Attributes.** Every message the pipeline publishes carries the fields a
subscriber filters on, so a dead-letter subscription can select one stage or
one key (``attributes.stage = "STAGE_MODEL"``) without parsing the JSON:

* intents: ``entity_key``, ``event_id``, ``seq``, ``traceparent``;
* dead letters: ``stage``, ``entity_key``, ``retriable``, ``event_id``, ``traceparent``.

An input message's ``traceparent`` attribute (W3C trace context) reaches the
activation as the event's own, so its span is a child of the producer's.

A key that is not UTF-8 goes as ``entity_key_b64``; one whose value is over
Pub/Sub's 1,024-byte attribute limit goes as ``entity_key_sha256`` (the hex
digest of its bytes), and the body still holds the whole key.

**A local streaming run that stops cleanly.** Beam's local runner pulls a
subscription in ten-message batches with a 30 s wait and acknowledges each
batch as soon as it is pulled, before anything downstream has run. Killed,
a run loses what it pulled and had not finished; stopped with Ctrl-C, it
used to lose the same. `LocalSubscriptionReads` changes two things of that
reader for the runs `beam-agents run` makes on the local runner:

* it pulls up to 100 messages with a 1 s wait, so a quiet subscription costs
  one second of latency, not thirty;
* once `stop` is called it pulls nothing more and reports the source done.
  The watermark then passes the end of time, as a Dataflow drain makes it,
  so every key's end-of-input timer runs what the key still holds and the
  pipeline finishes with every pulled message ended as an intent or a dead
  letter, published. Messages not yet pulled stay in the subscription.

The reader is the local runner's own (a private class of Beam's, the same in
2.61 and 2.77); `tests/beam/test_pubsub.py` runs it on both lines. Dataflow
never uses it: its source acknowledges only what a checkpoint made durable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["ATTRIBUTE_VALUE_BYTES", "LocalSubscriptionReads", "Redriven", "attributes_of",
           "redrive_subscription", "to_message"]

#: Pub/Sub's limit on one attribute value, in bytes.
ATTRIBUTE_VALUE_BYTES = 1024

#: The attributes each output's messages carry, besides the entity key; a
#: ``traceparent`` carries the activation's trace context on to subscribers.
_FIELDS = {"intents": ("event_id", "seq", "traceparent"),
           "errors": ("stage", "retriable", "event_id", "traceparent")}

#: The local reader's pull: more per batch, and a short wait on a quiet subscription.
_PULL_MAX_MESSAGES = 100
_PULL_TIMEOUT_S = 1.0


def attributes_of(line: bytes, channel: str) -> dict[str, str]:
    """The Pub/Sub attributes of one output line (an intent or an error record)."""
    record = json.loads(line)
    out: dict[str, str] = {}
    for name in _FIELDS[channel]:
        value = record.get(name)
        if value is None or value == "":
            continue
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    out.update(_key_attribute(record))
    return out


def _key_attribute(record: dict[str, Any]) -> dict[str, str]:
    if "entity_key" in record:
        text: str = record["entity_key"]
        raw = text.encode()
        if len(raw) <= ATTRIBUTE_VALUE_BYTES:
            return {"entity_key": text}
    elif "entity_key_b64" in record:
        encoded: str = record["entity_key_b64"]
        raw = base64.b64decode(encoded)
        if len(encoded) <= ATTRIBUTE_VALUE_BYTES:
            return {"entity_key_b64": encoded}
    else:
        return {}
    return {"entity_key_sha256": hashlib.sha256(raw).hexdigest()}


def to_message(channel: str) -> Callable[[bytes], Any]:
    """A function from an output line to the ``PubsubMessage`` that publishes it."""
    from apache_beam.io.gcp.pubsub import PubsubMessage  # noqa: PLC0415 - gcp extra

    def convert(line: bytes) -> Any:
        return PubsubMessage(line, attributes_of(line, channel))

    return convert


class LocalSubscriptionReads:
    """The local runner's subscription reader, with a shorter pull and a way to stop it.

    `install` is process-wide and lasts until `uninstall`; `stop` makes every
    installed reader finish. Use it around one local run.
    """

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._saved: dict[str, Any] = {}
        self._pulled = 0
        self._client: Any = None
        #: Called after each non-empty pull is counted and before it is acknowledged,
        #: so a report it prints never undercounts what the subscription gave up.
        self.on_pull: Callable[[], None] | None = None

    @property
    def pulled(self) -> int:
        """Messages pulled since `install`: every one acknowledged is counted first."""
        return self._pulled

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called."""
        return self._stopped.is_set()

    def stop(self) -> None:
        """Pull no more; the source ends after the pull in progress (≤ 1 s)."""
        self._stopped.set()

    def install(self) -> None:
        """Put this reader in place of the local runner's own."""
        from apache_beam.runners.direct import transform_evaluator  # noqa: PLC0415
        from apache_beam.runners.direct.util import TransformResult  # noqa: PLC0415
        from apache_beam.utils.timestamp import MAX_TIMESTAMP  # noqa: PLC0415

        evaluator = transform_evaluator._PubSubReadEvaluator
        self._saved = {"_read_from_pubsub": evaluator._read_from_pubsub,
                       "finish_bundle": evaluator.finish_bundle}
        finish = self._saved["finish_bundle"]
        stopped = self._stopped

        def read(reader: Any, timestamp_attribute: str | None) -> list[tuple[Any, Any]]:
            if stopped.is_set():
                return []
            if self._client is None:
                from google.cloud.pubsub_v1 import SubscriberClient  # noqa: PLC0415

                self._client = SubscriberClient()  # one channel for the run, not one per pull
            return list(_pull(self._client, reader._sub_name, timestamp_attribute,
                              before_ack=self._count))

        def finish_bundle(reader: Any) -> Any:
            if stopped.is_set():
                # No more bundles of this source, and its watermark at the end of time.
                return TransformResult(reader, [], [], None, {None: MAX_TIMESTAMP})
            return finish(reader)

        setattr(evaluator, "_read_from_pubsub", read)  # noqa: B010 - a patch, on purpose
        setattr(evaluator, "finish_bundle", finish_bundle)  # noqa: B010

    def _count(self, pulled: int) -> None:
        self._pulled += pulled  # one reader thread at a time per source
        if self.on_pull is not None:
            self.on_pull()

    def uninstall(self) -> None:
        """Put the local runner's own reader back, and close the client it pulled with."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if not self._saved:
            return
        from apache_beam.runners.direct import transform_evaluator  # noqa: PLC0415

        for name, value in self._saved.items():
            setattr(transform_evaluator._PubSubReadEvaluator, name, value)
        self._saved = {}


def _pull(client: Any, subscription: str, timestamp_attribute: str | None, *,
          before_ack: Callable[[int], None]) -> Iterator[tuple[Any, Any]]:
    """One pull: ``(timestamp, PubsubMessage)`` pairs, acknowledged as Beam's reader does.

    `before_ack` hears how many messages came, before they are acknowledged.
    """
    from apache_beam.io.gcp.pubsub import PubsubMessage  # noqa: PLC0415
    from apache_beam.utils.timestamp import Timestamp  # noqa: PLC0415
    from google.api_core import exceptions  # noqa: PLC0415

    try:
        response = client.pull(subscription=subscription, max_messages=_PULL_MAX_MESSAGES,
                               timeout=_PULL_TIMEOUT_S, retry=None)
    except exceptions.DeadlineExceeded:
        return
    received = list(response.received_messages)
    pairs = []
    for item in received:
        message = item.message
        attributes = dict(message.attributes)
        stamp = attributes.get(timestamp_attribute or "")
        if not stamp:
            timestamp = Timestamp.from_utc_datetime(message.publish_time)
        elif stamp.isdigit():  # milliseconds since the epoch, or RFC 3339, as Beam reads them
            timestamp = Timestamp(micros=int(stamp) * 1000)
        else:
            timestamp = Timestamp.from_rfc3339(stamp)
        pairs.append((timestamp, PubsubMessage(message.data, attributes,
                                               message_id=message.message_id)))
    if received:
        before_ack(len(received))
        client.acknowledge(subscription=subscription,
                           ack_ids=[item.ack_id for item in received])
    yield from pairs


@dataclass(frozen=True, slots=True)
class Redriven:
    """What a redrive from a subscription did: messages redriven, and messages left there."""

    redriven: int
    left: int


def redrive_subscription(subscription: str, topic: str,
                         convert: Callable[[bytes], list[bytes] | None], *,
                         dry_run: bool = False) -> Redriven:
    """Publish the input lines of every dead letter in `subscription` to `topic`.

    Each message is acknowledged once its lines were published, so an
    interrupted redrive leaves the rest in the subscription. A message that
    `convert` refuses (None), and with `dry_run` every message, is handed back
    for redelivery; the pull ends when it brings only messages already seen.
    """
    from google.api_core import exceptions  # noqa: PLC0415
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient  # noqa: PLC0415

    subscriber, publisher = SubscriberClient(), PublisherClient()
    seen: set[str] = set()
    redriven = left = 0
    try:
        while True:
            try:
                response = subscriber.pull(subscription=subscription,
                                           max_messages=_PULL_MAX_MESSAGES, timeout=5.0)
            except exceptions.DeadlineExceeded:
                break
            fresh = [item for item in response.received_messages
                     if item.message.message_id not in seen]
            if not fresh:
                _hand_back(subscriber, subscription, response.received_messages)
                break
            done: list[str] = []
            back = [item for item in response.received_messages if item not in fresh]
            for item in fresh:
                seen.add(item.message.message_id)
                lines = convert(item.message.data)
                if lines is None:
                    left += 1
                    back.append(item)
                    continue
                redriven += 1
                if dry_run:
                    back.append(item)
                    continue
                for future in [publisher.publish(topic, line) for line in lines]:
                    future.result()
                done.append(item.ack_id)
            if done:
                subscriber.acknowledge(subscription=subscription, ack_ids=done)
            _hand_back(subscriber, subscription, back)
    finally:
        subscriber.close()
    return Redriven(redriven=redriven, left=left)


def _hand_back(subscriber: Any, subscription: str, items: Any) -> None:
    """Make `items` deliverable again now (a zero ack deadline)."""
    ack_ids = [item.ack_id for item in items]
    if ack_ids:
        subscriber.modify_ack_deadline(subscription=subscription, ack_ids=ack_ids,
                                       ack_deadline_seconds=0)
