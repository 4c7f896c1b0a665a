#!/usr/bin/env python3
"""The gRPC port as a client that is not ours sees it: Python's grpcio (Debian's
python3-grpcio), the way grpcurl and Kubernetes probes use a gRPC server.

Starts the built `calleval serve` on free ports with a fresh data dir, then:
  - health: Check for "" and every service the process serves (SERVING), NOT_FOUND otherwise;
  - reflection v1 and v1alpha: list the services and describe each, grpc.health.v1.Health too,
    building the messages from the served descriptors only (as grpcurl does);
  - errors: a public method with an unknown id fails NOT_FOUND, with grpc-status-details-bin a
    google.rpc.Status of the same code and message whose details[0] is the ErrorInfo as an Any;
  - internal methods: UNAUTHENTICATED without or with a wrong internal credential.

Only the reflection protocol and google.rpc.Status are compiled here (with protoc, from the
project's copy of the upstream reflection.proto and Debian's status.proto); every calleval and
health message comes from reflection. Prints what it sees: `ctest -V -R e2e_grpc_client`.
"""
import importlib.util
import os
import subprocess
import tempfile
import unittest

import grpc
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

from serve_process import ServeProcess
from google.protobuf import text_format

CALLEVAL = os.environ.get("CALLEVAL_BIN")
PROTOC = os.environ.get("PROTOC", "protoc")
PROTO_DIR = os.environ.get("CALLEVAL_PROTO_DIR")
GOOGLEAPIS_DIR = os.environ.get("GOOGLEAPIS_DIR",
                                "/usr/share/gocode/src/github.com/gogo/googleapis")

SERVED = ["calleval.v1.Accounts", "calleval.v1.Agents", "calleval.v1.Calls",
          "calleval.v1.Metrics"]
INTERNAL_HEADER = "x-calleval-internal"


def compile_protos(out_dir):
    os.makedirs(out_dir)
    subprocess.run([PROTOC, "-I", PROTO_DIR, "-I", GOOGLEAPIS_DIR, "--python_out", out_dir,
                    "grpc/reflection/v1/reflection.proto", "google/rpc/status.proto"],
                   check=True)
    # Loaded by path: the generated packages `grpc` and `google` would clash with grpcio's and
    # protobuf's own.
    return (load_module(os.path.join(out_dir, "grpc/reflection/v1/reflection_pb2.py")),
            load_module(os.path.join(out_dir, "google/rpc/status_pb2.py")))


def load_module(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class GrpcClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.reflection_pb2, cls.status_pb2 = compile_protos(os.path.join(cls.tmp.name, "gen"))
        cls.data_dir = os.path.join(cls.tmp.name, "data")
        cls.server = ServeProcess(CALLEVAL, cls.data_dir)
        with open(os.path.join(cls.data_dir, "bootstrap-key")) as f:
            cls.key = f.read().strip()
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % cls.server.grpc_port)
        grpc.channel_ready_future(cls.channel).result(timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        code = cls.server.stop()
        cls.tmp.cleanup()
        assert code == 0, "calleval serve exited %d" % code

    # Reflection.

    def reflect(self, version, **request):
        """One request on a ServerReflectionInfo stream of `version` ("v1" or "v1alpha"). The
        two versions have the same messages, so v1's classes speak to both."""
        pb = self.reflection_pb2
        call = self.channel.stream_stream(
            "/grpc.reflection.%s.ServerReflection/ServerReflectionInfo" % version,
            request_serializer=pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=pb.ServerReflectionResponse.FromString)
        responses = list(call(iter([pb.ServerReflectionRequest(**request)]), timeout=10))
        self.assertEqual(len(responses), 1)
        response = responses[0]
        self.assertFalse(response.HasField("error_response"),
                         "%s %s: %s" % (version, request, response.error_response))
        return response

    def pool_for(self, version, symbol):
        """A descriptor pool holding the file that defines `symbol` and its imports, from the
        server alone."""
        files = {}
        for raw in self.reflect(version, file_containing_symbol=symbol) \
                .file_descriptor_response.file_descriptor_proto:
            proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
            files[proto.name] = proto
        pool = descriptor_pool.DescriptorPool()
        added = set()

        def add(name):
            if name in added:
                return
            self.assertIn(name, files, "reflection left out an import of " + symbol)
            for dep in files[name].dependency:
                add(dep)
            pool.Add(files[name])
            added.add(name)

        for name in files:
            add(name)
        return pool

    def message_class(self, pool, name):
        return message_factory.MessageFactory(pool).GetPrototype(
            pool.FindMessageTypeByName(name))

    def test_reflection_lists_and_describes_every_service(self):
        expected = set(SERVED) | {"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                                  "grpc.reflection.v1alpha.ServerReflection"}
        for version in ("v1", "v1alpha"):
            listed = {s.name for s in
                      self.reflect(version, list_services="").list_services_response.service}
            print("reflection %s lists: %s" % (version, " ".join(sorted(listed))))
            self.assertEqual(listed, expected)
            for service in sorted(listed):
                described = self.pool_for(version, service).FindServiceByName(service)
                self.assertGreater(len(described.methods), 0, service)
                if service in ("grpc.health.v1.Health", "calleval.v1.Calls"):
                    print("describe (%s) %s:\n%s" % (version, service, describe(described)))
            # A method and a message resolve too, as grpcurl describe asks.
            self.pool_for(version, "calleval.v1.Calls.GetCall")
            self.pool_for(version, "calleval.v1.ErrorInfo")

    # Health.

    def health_check(self, service):
        pool = self.pool_for("v1", "grpc.health.v1.Health")
        request_class = self.message_class(pool, "grpc.health.v1.HealthCheckRequest")
        response_class = self.message_class(pool, "grpc.health.v1.HealthCheckResponse")
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check",
                                         request_serializer=request_class.SerializeToString,
                                         response_deserializer=response_class.FromString)
        response = check(request_class(service=service), timeout=10)
        status_enum = response.DESCRIPTOR.fields_by_name["status"].enum_type
        return status_enum.values_by_number[response.status].name

    def test_health_per_service(self):
        for service in [""] + SERVED:
            status = self.health_check(service)
            print("health Check service=%r: status: %s" % (service, status))
            self.assertEqual(status, "SERVING", service)
        with self.assertRaises(grpc.RpcError) as raised:
            self.health_check("calleval.v1.Nothing")
        print("health Check service='calleval.v1.Nothing': %s" % raised.exception.code())
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)

    # Errors.

    def test_not_found_carries_a_google_rpc_status(self):
        pool = self.pool_for("v1", "calleval.v1.Calls")
        request_class = self.message_class(pool, "calleval.v1.GetCallRequest")
        call_class = self.message_class(pool, "calleval.v1.Call")
        get_call = self.channel.unary_unary("/calleval.v1.Calls/GetCall",
                                            request_serializer=request_class.SerializeToString,
                                            response_deserializer=call_class.FromString)
        with self.assertRaises(grpc.RpcError) as raised:
            get_call(request_class(call_identifier_or_id="no-such-call"), timeout=10,
                     metadata=[("authorization", "Bearer " + self.key)])
        error = raised.exception
        trailers = dict(error.trailing_metadata())
        self.assertIn("grpc-status-details-bin", trailers)
        status = self.status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        print("GetCall no-such-call: code=%s message=%r" % (error.code(), error.details()))
        print("grpc-status-details-bin as google.rpc.Status:\n" +
              text_format.MessageToString(status, indent=2))
        self.assertEqual(error.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(status.code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertEqual(status.message, error.details())
        self.assertEqual(len(status.details), 1)
        self.assertEqual(status.details[0].type_url, "type.googleapis.com/calleval.v1.ErrorInfo")
        info = self.message_class(pool, "calleval.v1.ErrorInfo").FromString(
            status.details[0].value)
        print("details[0] as calleval.v1.ErrorInfo: " + text_format.MessageToString(
            info, as_one_line=True))
        self.assertEqual(info.code, "not_found")

    # Internal methods.

    def test_internal_methods_need_the_internal_credential(self):
        pool = self.pool_for("v1", "calleval.v1.Calls")
        request_class = self.message_class(pool, "calleval.v1.LeaseAnalysisRequest")
        response_class = self.message_class(pool, "calleval.v1.LeaseAnalysisResponse")
        lease = self.channel.unary_unary("/calleval.v1.Calls/LeaseAnalysis",
                                         request_serializer=request_class.SerializeToString,
                                         response_deserializer=response_class.FromString)
        request = request_class(lease_seconds=60, max_attempts=3)
        # The API key is no internal credential.
        for metadata in ([], [("authorization", "Bearer " + self.key)],
                         [(INTERNAL_HEADER, "not-the-credential")]):
            with self.assertRaises(grpc.RpcError) as raised:
                lease(request, timeout=10, metadata=metadata)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED,
                             metadata)
        print("LeaseAnalysis without the internal credential: %s %r" %
              (raised.exception.code(), raised.exception.details()))
        credential_file = os.path.join(self.data_dir, "internal-credential")
        self.assertEqual(os.stat(credential_file).st_mode & 0o077, 0)
        with open(credential_file) as f:
            credential = f.read().strip()
        lease(request, timeout=10, metadata=[(INTERNAL_HEADER, credential)])


def describe(service):
    """A service as grpcurl's `describe` prints it."""
    proto = descriptor_pb2.ServiceDescriptorProto()
    service.CopyToProto(proto)
    lines = ["%s is a service:" % service.full_name, "service %s {" % service.name]
    for method in proto.method:
        lines.append("  rpc %s ( %s%s ) returns ( %s%s );" % (
            method.name, "stream " if method.client_streaming else "", method.input_type,
            "stream " if method.server_streaming else "", method.output_type))
    lines.append("}")
    return "\n".join(lines)


if __name__ == "__main__":
    unittest.main(verbosity=2)
