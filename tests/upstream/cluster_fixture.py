#!/usr/bin/env python
# -*- coding: utf-8 -*-
#
# Copyright 2020 Confluent Inc.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
# http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#

# Ported to ykafka from confluent-kafka-python v2.15.0 (commit 8b1c7a61), tests/integration/cluster_fixture.py.
# KafkaClusterFixture as upstream with the imports of the clients under test changed to ykafka's; the
# share-consumer helpers (KIP-932) and the trivup / BYO fixtures are left out: YkafkaFixture (the thin
# adapter) binds it to this suite's brokers and to confluent-kafka's in-process Schema Registry (mock://).

import time
from uuid import uuid1

from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import AsyncSchemaRegistryClient, SchemaRegistryClient

from tests.upstream.common._async.consumer import TestAsyncDeserializingConsumer
from tests.upstream.common._async.producer import TestAsyncSerializingProducer
from tests.upstream.common.schema_registry import TestDeserializingConsumer
from ykafka import Producer, SerializingProducer  # ykafka: was confluent_kafka's


class KafkaClusterFixture(object):
    __slots__ = ['_cluster', '_admin', '_producer']

    def __init__(self, conf):
        raise NotImplementedError("KafkaCluster should never be instantiated directly")

    def schema_registry(self, conf=None):
        raise NotImplementedError("schema_registry has not been implemented")

    def client_conf(self, conf=None):
        raise NotImplementedError("client_conf has not been implemented")

    @classmethod
    def _topic_conf(cls, conf=None):
        topic_conf = {'num_partitions': 1, 'replication_factor': 1}

        if conf is not None:
            topic_conf.update(conf)

        return topic_conf

    def cimpl_producer(self, conf=None):
        """
        Returns a producer bound to this cluster.

        Args:
            conf (dict): Producer configuration overrides

        Returns:
            Producer: A new Producer instance
        """
        return Producer(self.client_conf(conf))

    def producer(self, conf=None, key_serializer=None, value_serializer=None):
        """
        Returns a producer bound to this cluster.

        Args:
            conf (dict): Producer configuration overrides

            key_serializer (Serializer): serializer to apply to message key

            value_serializer (Deserializer): serializer to apply to
                message value

        Returns:
            Producer: A new SerializingProducer instance

        """
        client_conf = self.client_conf(conf)

        if key_serializer is not None:
            client_conf['key.serializer'] = key_serializer

        if value_serializer is not None:
            client_conf['value.serializer'] = value_serializer

        return SerializingProducer(client_conf)

    def async_producer(self, conf=None, key_serializer=None, value_serializer=None):
        """
        Returns a producer bound to this cluster.

        Args:
            conf (dict): Producer configuration overrides

            key_serializer (Serializer): serializer to apply to message key

            value_serializer (Deserializer): serializer to apply to
                message value

        Returns:
            Producer: A new SerializingProducer instance

        """
        client_conf = self.client_conf(conf)

        if key_serializer is not None:
            client_conf['key.serializer'] = key_serializer

        if value_serializer is not None:
            client_conf['value.serializer'] = value_serializer

        return TestAsyncSerializingProducer(client_conf)

    def consumer(self, conf=None, key_deserializer=None, value_deserializer=None):
        """
        Returns a consumer bound to this cluster.

        Args:
            conf (dict): Consumer config overrides

            key_deserializer (Deserializer): deserializer to apply to
                message key

            value_deserializer (Deserializer): deserializer to apply to
                message value

        Returns:
            Consumer: A new DeserializingConsumer instance

        """
        consumer_conf = self.client_conf({'group.id': str(uuid1()), 'auto.offset.reset': 'earliest'})

        if conf is not None:
            consumer_conf.update(conf)

        if key_deserializer is not None:
            consumer_conf['key.deserializer'] = key_deserializer

        if value_deserializer is not None:
            consumer_conf['value.deserializer'] = value_deserializer

        return TestDeserializingConsumer(consumer_conf)

    def async_consumer(self, conf=None, key_deserializer=None, value_deserializer=None):
        """
        Returns a consumer bound to this cluster.

        Args:
            conf (dict): Consumer config overrides

            key_deserializer (Deserializer): deserializer to apply to
                message key

            value_deserializer (Deserializer): deserializer to apply to
                message value

        Returns:
            Consumer: A new DeserializingConsumer instance

        """
        consumer_conf = self.client_conf({'group.id': str(uuid1()), 'auto.offset.reset': 'earliest'})

        if conf is not None:
            consumer_conf.update(conf)

        if key_deserializer is not None:
            consumer_conf['key.deserializer'] = key_deserializer

        if value_deserializer is not None:
            consumer_conf['value.deserializer'] = value_deserializer

        return TestAsyncDeserializingConsumer(consumer_conf)

    def admin(self, conf=None):
        if conf:
            # When conf is passed create a new AdminClient
            admin_conf = self.client_conf()
            admin_conf.update(conf)
            return AdminClient(admin_conf)

        # Otherwise use a common one
        if self._admin is None:
            self._admin = AdminClient(self.client_conf())
        return self._admin

    def create_topic(self, prefix, conf=None, **create_topic_kwargs):
        """
        Creates a new topic with this cluster.

        :param str prefix: topic name
        :param dict conf: additions/overrides to topic configuration.
        :returns: The topic's name
        :rtype: str
        """
        name = prefix + "-" + str(uuid1())
        future_topic = self.admin().create_topics([NewTopic(name, **self._topic_conf(conf))], **create_topic_kwargs)

        future_topic.get(name).result()
        return name

    def delete_topic(self, topic):
        """
        Deletes a topic with this cluster.

        :param str topic: topic name
        """
        future = self.admin().delete_topics([topic])
        try:
            future.get(topic).result()
            print("Topic {} deleted".format(topic))
        except Exception as e:
            print("Failed to delete topic {}: {}".format(topic, e))

    def create_topic_and_wait_propogation(self, prefix, conf=None, **create_topic_kwargs):
        """
        Creates a new topic with this cluster. Wait for the topic to be propogated to all brokers.

        :param str prefix: topic name
        :param dict conf: additions/overrides to topic configuration.
        :returns: The topic's name
        :rtype: str
        """
        name = self.create_topic(prefix, conf, **create_topic_kwargs)

        # wait for topic propogation across all the brokers.
        # FIXME: find a better way to wait for topic creation
        #        for all languages, given option to send request to
        #        a specific broker isn't present everywhere.
        time.sleep(1)

        return name

    def seed_topic(self, topic, value_source=None, key_source=None, header_source=None):
        """
        Populates a topic with data asynchronously.

        If there are fewer keys or headers than values the index will be wrapped and reused with
        each subsequent produce request.

        :param str topic: topic to produce test data to.
        :param list value_source: list or other iterable containing message key data to be produced.
        :param list key_source: list or other iterable containing message value data to be produced.
        :param list(dict) header_source: headers to attach to test data.
        """

        if self._producer is None:
            self._producer = self.producer(self.client_conf({'linger.ms': 500}))

        if value_source is None:
            value_source = ['test-data{}'.format(i) for i in range(0, 100)]

        if key_source is None:
            key_source = [None]

        KafkaClusterFixture._produce(self._producer, topic, value_source, key_source, header_source)

    @staticmethod
    def _produce(producer, topic, value_source, key_source, header_source=None):
        """
        Produces a message for each value in value source to a topic.

        value_source drives the produce loop. If corresponding key and header sources
        are specified they will be applied in round robbin order. In the event there
        are less keys or headers than values the index will be wrapped.

        :param producer: producer instance to use
        :param topic:  topic to produce to
        :param value_source: collection of message values
        :param key_source: optional keys to accompany values_source items
        :param header_source: optional headers to accompany value_source items
        :return:
        """
        num_messages = len(value_source)
        num_keys = len(key_source)
        num_headers = len(header_source) if header_source else 0

        print('# producing {} messages to topic {}'.format(num_messages, topic))
        for i in range(0, num_messages):
            while True:
                try:
                    if header_source is not None:
                        producer.produce(
                            topic,
                            value=value_source[i],
                            key=key_source[i % num_keys],
                            headers=header_source[i % (num_headers + 1)],
                        )
                    else:
                        producer.produce(topic, value=value_source[i], key=key_source[i % num_keys])
                    break
                except BufferError:
                    producer.poll(0.1)
                continue
            producer.poll(0.0)

        producer.flush()

        print('# finished producing {} messages to topic {}'.format(num_messages, topic))


class YkafkaFixture(KafkaClusterFixture):
    """The thin adapter (ykafka, not upstream): the suite's broker instead of trivup, one in-process
    Schema Registry (``mock://``, shared by every client the fixture hands out: a mock client keeps its
    schemas to itself) instead of Confluent's server, and a private ykafka cache folder."""

    def __init__(self, bootstrap, cache_dir):
        self._admin = None
        self._producer = None
        self._cluster = None
        self._clients = []
        self._conf = {"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(cache_dir)}
        url = "mock://ykafka-upstream-{}".format(uuid1())
        self._sr = SchemaRegistryClient.new_client({"url": url})
        self._async_sr = AsyncSchemaRegistryClient.new_client({"url": url})

    def schema_registry(self, conf=None):
        return self._sr

    def async_schema_registry(self, conf=None):
        return self._async_sr

    def client_conf(self, conf=None):
        client_conf = self._conf.copy()
        if conf is not None:
            client_conf.update(conf)
        return client_conf

    def admin(self, conf=None):
        # confluent-kafka's AdminClient creates the topics: it takes librdkafka settings only
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self._conf["bootstrap.servers"]})
        return self._admin

    # Upstream's tests leave their clients to the garbage collector, as confluent-kafka's clients allow; a ykafka
    # client's background threads keep it alive until it is closed, so the adapter closes what each test made
    # (tests/upstream/conftest.py) instead of letting a module leave a hundred reconnecting clients behind.
    def cimpl_producer(self, conf=None):
        return self._made(super().cimpl_producer(conf))

    def producer(self, conf=None, key_serializer=None, value_serializer=None):
        return self._made(super().producer(conf, key_serializer, value_serializer))

    def async_producer(self, conf=None, key_serializer=None, value_serializer=None):
        return self._made(super().async_producer(conf, key_serializer, value_serializer))

    def consumer(self, conf=None, key_deserializer=None, value_deserializer=None):
        return self._made(super().consumer(conf, key_deserializer, value_deserializer))

    def async_consumer(self, conf=None, key_deserializer=None, value_deserializer=None):
        return self._made(super().async_consumer(conf, key_deserializer, value_deserializer))

    def _made(self, client):
        self._clients.append(client)
        return client

    def close_clients(self):
        clients, self._clients = self._clients, []
        for client in clients:
            client.close()
        # seed_topic's producer is one of them: the next test's seed_topic makes a fresh one
        self._producer = None

    def stop(self):
        self.close_clients()
