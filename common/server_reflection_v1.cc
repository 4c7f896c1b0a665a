#include "common/server_reflection_v1.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <grpcpp/impl/server_initializer.h>

#include <atomic>
#include <set>

#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace calleval {
namespace {

namespace rv1 = grpc::reflection::v1;
using google::protobuf::FileDescriptor;

// Appends `file` and, once each, every file it imports: a client builds its own pool from them.
void AddFileAndImports(const FileDescriptor* file, std::set<std::string>* sent,
                       rv1::FileDescriptorResponse* out) {
  if (!sent->insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileAndImports(file->dependency(i), sent, out);
  }
}

void SetError(grpc::StatusCode code, const std::string& message,
              rv1::ServerReflectionResponse* response) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

class ReflectionService final : public rv1::ServerReflection::CallbackService {
 public:
  void set_services(const std::vector<std::string>* services) { services_.store(services); }

  grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override {
    return new Stream(this);
  }

 private:
  // Reads a request, writes its answer, until the client closes its side.
  class Stream final : public grpc::ServerBidiReactor<rv1::ServerReflectionRequest,
                                                      rv1::ServerReflectionResponse> {
   public:
    explicit Stream(const ReflectionService* service) : service_(service) { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      response_ = AnswerReflection(request_, *google::protobuf::DescriptorPool::generated_pool(),
                                   service_->services_.load());
      StartWrite(&response_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the client went away"));
        return;
      }
      StartRead(&request_);
    }
    void OnDone() override { delete this; }

   private:
    const ReflectionService* service_;
    rv1::ServerReflectionRequest request_;
    rv1::ServerReflectionResponse response_;
  };

  // Owned by the grpc::Server, which outlives its services' calls.
  std::atomic<const std::vector<std::string>*> services_{nullptr};
};

// Registers the service before the server starts and hands it the server's service list after.
class ReflectionPlugin final : public grpc::ServerBuilderPlugin {
 public:
  std::string name() override { return "calleval_reflection_v1"; }
  void InitServer(grpc::ServerInitializer* initializer) override {
    initializer->RegisterService(service_);
  }
  void Finish(grpc::ServerInitializer* initializer) override {
    service_->set_services(initializer->GetServiceList());
  }
  void ChangeArguments(const std::string& name, void* value) override {}

 private:
  std::shared_ptr<ReflectionService> service_ = std::make_shared<ReflectionService>();
};

class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->push_back(std::make_unique<ReflectionPlugin>());
  }
};

}  // namespace

rv1::ServerReflectionResponse AnswerReflection(const rv1::ServerReflectionRequest& request,
                                               const google::protobuf::DescriptorPool& pool,
                                               const std::vector<std::string>* services) {
  rv1::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  std::set<std::string> sent;
  switch (request.message_request_case()) {
    case rv1::ServerReflectionRequest::kListServices:
      if (services == nullptr) {
        SetError(grpc::StatusCode::UNAVAILABLE, "the server is starting", &response);
        break;
      }
      for (const std::string& name : *services) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case rv1::ServerReflectionRequest::kFileByFilename:
      if (const FileDescriptor* file = pool.FindFileByName(request.file_by_filename())) {
        AddFileAndImports(file, &sent, response.mutable_file_descriptor_response());
      } else {
        SetError(grpc::StatusCode::NOT_FOUND, "File not found.", &response);
      }
      break;
    case rv1::ServerReflectionRequest::kFileContainingSymbol:
      if (const FileDescriptor* file =
              pool.FindFileContainingSymbol(request.file_containing_symbol())) {
        AddFileAndImports(file, &sent, response.mutable_file_descriptor_response());
      } else {
        SetError(grpc::StatusCode::NOT_FOUND, "Symbol not found.", &response);
      }
      break;
    case rv1::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const google::protobuf::Descriptor* type = pool.FindMessageTypeByName(ext.containing_type());
      const google::protobuf::FieldDescriptor* field =
          type == nullptr ? nullptr : pool.FindExtensionByNumber(type, ext.extension_number());
      if (field != nullptr) {
        AddFileAndImports(field->file(), &sent, response.mutable_file_descriptor_response());
      } else {
        SetError(grpc::StatusCode::NOT_FOUND,
                 type == nullptr ? "Type not found." : "Extension not found.", &response);
      }
      break;
    }
    case rv1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const std::string& name = request.all_extension_numbers_of_type();
      const google::protobuf::Descriptor* type = pool.FindMessageTypeByName(name);
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Type not found.", &response);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool.FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(name);
      for (const auto* field : extensions) numbers->add_extension_number(field->number());
      break;
    }
    case rv1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::UNIMPLEMENTED, "unknown request", &response);
      break;
  }
  return response;
}

std::unique_ptr<grpc::ServerBuilderOption> ServerReflectionV1() {
  return std::make_unique<ReflectionOption>();
}

}  // namespace calleval
