// The Accounts adapter on a real gRPC server over the real accounts store: key authentication
// and workspace resolution of GetCurrentWorkspace, and the internal-credential gate of
// Authenticate (the method the other roles' remote authenticator calls).

#include "services/accounts/accounts_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "calleval/v1/accounts.grpc.pb.h"
#include "common/internal_credential.h"
#include "common/thread_pool.h"
#include "services/calls/credits.h"
#include "tests/services/service_test_support.h"

namespace calleval::accounts {
namespace {

using ::calleval::testing::ContextWith;
using ::calleval::testing::ContextWithKey;
using ::calleval::testing::InternalContext;
using ::calleval::testing::kTestInternalCredential;
using ::calleval::testing::Metadata;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class AccountsServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    if (HasFatalFailure()) return;
    service_ = std::make_unique<AccountsService>(accounts_store_.get(), authenticator_.get(),
                                                 &pool_, kTestInternalCredential);
    server_ = testing::TestGrpcServer::Serve(service_.get());
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Accounts::NewStub(server_->channel());
  }

  ThreadPool pool_{2};
  std::unique_ptr<AccountsService> service_;
  std::unique_ptr<testing::TestGrpcServer> server_;
  std::unique_ptr<v1::Accounts::Stub> stub_;
};

TEST_P(AccountsServiceTest, CurrentWorkspaceIsTheKeysOwn) {
  ASSERT_TRUE(accounts_store_->AddCredits(tenants_.own, 250).ok());
  v1::Workspace workspace;
  ASSERT_GRPC_OK(stub_->GetCurrentWorkspace(ContextWithKey(tenants_.key).get(), {}, &workspace));
  EXPECT_EQ(workspace.id(), tenants_.own);
  EXPECT_EQ(workspace.name(), "own");
  EXPECT_EQ(workspace.credit_balance(), 100000 + 250);
}

TEST_P(AccountsServiceTest, ClientIdSelectsAGrantedWorkspace) {
  v1::GetCurrentWorkspaceRequest request;
  request.set_client_id(tenants_.granted);
  v1::Workspace workspace;
  ASSERT_GRPC_OK(
      stub_->GetCurrentWorkspace(ContextWithKey(tenants_.key).get(), request, &workspace));
  EXPECT_EQ(workspace.id(), tenants_.granted);
  EXPECT_EQ(workspace.name(), "granted");
  // The key's own workspace named explicitly is the same as none.
  request.set_client_id(tenants_.own);
  ASSERT_GRPC_OK(
      stub_->GetCurrentWorkspace(ContextWithKey(tenants_.key).get(), request, &workspace));
  EXPECT_EQ(workspace.id(), tenants_.own);
}

TEST_P(AccountsServiceTest, ClientIdOfAnotherWorkspaceIsForbidden) {
  v1::GetCurrentWorkspaceRequest request;
  v1::Workspace workspace;
  for (int64_t client_id : {tenants_.foreign, int64_t{987654}}) {
    request.set_client_id(client_id);
    EXPECT_GRPC_ERROR(
        stub_->GetCurrentWorkspace(ContextWithKey(tenants_.key).get(), request, &workspace),
        grpc::PERMISSION_DENIED, "workspace_not_accessible");
  }
  // The other workspace's own key reaches it, and only it.
  request.clear_client_id();
  ASSERT_GRPC_OK(
      stub_->GetCurrentWorkspace(ContextWithKey(tenants_.foreign_key).get(), request, &workspace));
  EXPECT_EQ(workspace.id(), tenants_.foreign);
}

TEST_P(AccountsServiceTest, EveryPublicMethodAuthenticatesAndResolvesTheWorkspace) {
  const auto* service = testing::ServiceNamed(v1::Accounts::service_full_name());
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseUnauthenticated(server_->channel(), service, tenants_),
      ElementsAre("GetCurrentWorkspace", "ListWorkspaces"));
  // ListWorkspaces names no workspace: it lists those the key may name.
  EXPECT_THAT(
      testing::ExpectPublicMethodsRefuseForeignWorkspace(server_->channel(), service, tenants_),
      ElementsAre("ListWorkspaces"));
}

// The ids of the workspaces ListWorkspaces answers `key`, in order.
std::vector<int64_t> ListedWorkspaceIds(v1::Accounts::Stub& stub, const std::string& key) {
  v1::ListWorkspacesResponse listed;
  const grpc::Status status = stub.ListWorkspaces(ContextWithKey(key).get(), {}, &listed);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<int64_t> ids;
  for (const v1::Workspace& ws : listed.data()) ids.push_back(ws.id());
  return ids;
}

TEST_P(AccountsServiceTest, ListWorkspacesAnswersTheKeysOwnThenItsGrants) {
  ASSERT_TRUE(accounts_store_->AddCredits(tenants_.granted, -40).ok());
  v1::ListWorkspacesResponse listed;
  ASSERT_GRPC_OK(stub_->ListWorkspaces(ContextWithKey(tenants_.key).get(), {}, &listed));
  ASSERT_EQ(listed.data_size(), 2);
  EXPECT_EQ(listed.data(0).id(), tenants_.own);
  EXPECT_EQ(listed.data(0).name(), "own");
  EXPECT_EQ(listed.data(0).credit_balance(), 100000);
  EXPECT_EQ(listed.data(1).id(), tenants_.granted);
  EXPECT_EQ(listed.data(1).name(), "granted");
  EXPECT_EQ(listed.data(1).credit_balance(), 100000 - 40);
}

TEST_P(AccountsServiceTest, ListWorkspacesPutsTheOwnFirstAndTheGrantsByIdWhateverTheirOrder) {
  // A workspace made after the others, whose key is granted them in reverse order (and its own
  // workspace as well, which counts once).
  auto newest = accounts_store_->CreateWorkspace("newest", 5);
  ASSERT_TRUE(newest.ok()) << newest.status();
  auto key = accounts_store_->CreateKey(
      newest->id, {tenants_.foreign, tenants_.granted, newest->id, tenants_.own});
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_THAT(ListedWorkspaceIds(*stub_, key->api_key),
              ElementsAre(newest->id, tenants_.own, tenants_.granted, tenants_.foreign));
}

TEST_P(AccountsServiceTest, ListWorkspacesOfAKeyWithoutGrantsIsItsOwn) {
  EXPECT_THAT(ListedWorkspaceIds(*stub_, tenants_.foreign_key), ElementsAre(tenants_.foreign));
}

TEST_P(AccountsServiceTest, ListWorkspacesInProcessAnswersLikeTheRpc) {
  for (const std::string& authorization :
       {testing::Bearer(tenants_.key), testing::Bearer(tenants_.foreign_key),
        testing::Bearer(tenants_.revoked_key), std::string()}) {
    SCOPED_TRACE(authorization);
    const v1::ListWorkspacesRequest request;
    v1::ListWorkspacesResponse direct, remote;
    const absl::Status direct_status =
        testing::CallInProcess(*service_, "ListWorkspaces", authorization, request, &direct);
    Metadata metadata;
    if (!authorization.empty()) metadata.push_back({"authorization", authorization});
    const grpc::Status remote_status =
        stub_->ListWorkspaces(ContextWith(metadata).get(), request, &remote);
    if (direct_status.ok()) {
      ASSERT_GRPC_OK(remote_status);
      EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
    } else {
      testing::ExpectSameOutcome(direct_status, remote_status);
    }
  }
}

TEST(WorkspacesOfKeyTest, OwnFirstThenEachGrantOnce) {
  EXPECT_THAT(WorkspacesOfKey(5, {}), ElementsAre(5));
  EXPECT_THAT(WorkspacesOfKey(5, {2, 5, 9, 2}), ElementsAre(5, 2, 9));
}

// Authenticate answers only the installation's own processes: an API key, however valid, or a
// wrong credential never reaches the store.
TEST_P(AccountsServiceTest, AuthenticateNeedsTheInternalCredential) {
  v1::AuthenticateRequest request;
  request.set_api_key(tenants_.key);
  const std::string credential = kTestInternalCredential;
  for (const Metadata& metadata :
       std::vector<Metadata>{{},
                             {{"authorization", testing::Bearer(tenants_.key)}},
                             {{kInternalCredentialMetadata, "another-installation-credential"}},
                             {{kInternalCredentialMetadata, credential + "x"}},
                             {{kInternalCredentialMetadata, credential.substr(1)}},
                             {{"authorization", "Bearer " + credential}}}) {
    v1::Principal principal;
    const grpc::Status status =
        stub_->Authenticate(ContextWith(metadata).get(), request, &principal);
    EXPECT_EQ(status.error_code(), grpc::UNAUTHENTICATED) << status.error_message();
    EXPECT_EQ(principal.key_id(), 0);
  }
}

TEST_P(AccountsServiceTest, AuthenticateAnswersThePrincipalOfAKey) {
  v1::AuthenticateRequest request;
  request.set_api_key(tenants_.key);
  v1::Principal principal;
  ASSERT_GRPC_OK(stub_->Authenticate(InternalContext().get(), request, &principal));
  EXPECT_EQ(principal.key_id(), tenants_.key_id);
  EXPECT_EQ(principal.workspace_id(), tenants_.own);
  EXPECT_THAT(principal.granted_workspace_ids(), ElementsAre(tenants_.granted));

  // Unknown and revoked keys: 401 with the detail the remote authenticator passes on.
  for (const std::string& key : {std::string("cev_unknown"), tenants_.revoked_key, std::string()}) {
    request.set_api_key(key);
    EXPECT_GRPC_ERROR(stub_->Authenticate(InternalContext().get(), request, &principal),
                      grpc::UNAUTHENTICATED, "unauthenticated");
  }
}

// Rotating the credential (common/internal_credential.h): the processes move one by one through
// old → old,new → new,old → new, restarting after each step, so at any moment two neighbouring
// steps run side by side; a process of either reaches a process of the other.
TEST_P(AccountsServiceTest, EveryStepOfACredentialRotationTalksToTheNext) {
  const std::string old_secret = "old-installation-secret-0123456789";
  const std::string new_secret = "new-installation-secret-9876543210";
  const std::vector<std::string> steps = {old_secret, old_secret + "\n" + new_secret,
                                          new_secret + "\n" + old_secret, new_secret};
  std::vector<std::unique_ptr<AccountsService>> services;
  std::vector<std::unique_ptr<testing::TestGrpcServer>> servers;
  for (const std::string& credential : steps) {
    services.push_back(std::make_unique<AccountsService>(
        accounts_store_.get(), authenticator_.get(), &pool_, credential));
    servers.push_back(testing::TestGrpcServer::Serve(services.back().get()));
    ASSERT_NE(servers.back(), nullptr);
  }
  auto reaches = [&](size_t client, size_t server) {
    auto remote = NewGrpcAuthenticator(
        CreateInternalChannel(servers[server]->address(), steps[client]), absl::ZeroDuration());
    return remote->Authenticate(testing::Bearer(tenants_.key)).ok();
  };
  for (size_t step = 0; step + 1 < steps.size(); ++step) {
    for (size_t a : {step, step + 1}) {
      for (size_t b : {step, step + 1}) EXPECT_TRUE(reaches(a, b)) << a << " → " << b;
    }
  }
  // Two steps apart, the old secret is gone on one side: a rotation must not skip a step.
  EXPECT_FALSE(reaches(3, 0));
  EXPECT_FALSE(reaches(0, 3));
}

// The remote authenticator of split roles, against this adapter: it sends the credential and
// resolves the same principal as the store; a revoked key stays refused.
TEST_P(AccountsServiceTest, RemoteAuthenticatorResolvesThroughTheAdapter) {
  auto remote = NewGrpcAuthenticator(
      CreateInternalChannel(server_->address(), kTestInternalCredential), absl::ZeroDuration());
  absl::StatusOr<Principal> principal = remote->Authenticate(testing::Bearer(tenants_.key));
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->key_id, tenants_.key_id);
  EXPECT_EQ(principal->workspace_id, tenants_.own);
  EXPECT_THAT(principal->granted_workspace_ids, ElementsAre(tenants_.granted));
  absl::Status revoked = remote->Authenticate(testing::Bearer(tenants_.revoked_key)).status();
  EXPECT_EQ(revoked.code(), absl::StatusCode::kUnauthenticated) << revoked;
  EXPECT_EQ(ErrorInfoOf(revoked).code(), "unauthenticated");
}

// ReserveCredits and RefundCredits answer only the installation's processes: an API key, however
// valid, does not open them, and nothing is charged.
TEST_P(AccountsServiceTest, CreditMethodsNeedTheInternalCredential) {
  v1::ReserveCreditsRequest reserve;
  reserve.set_workspace_id(tenants_.own);
  reserve.set_call_id(7001);
  v1::CreditCharge* charge = reserve.add_charges();
  charge->set_metric_id(1);
  charge->set_cost(5);
  v1::RefundCreditsRequest refund;
  refund.set_workspace_id(tenants_.own);
  refund.set_call_id(7001);
  refund.add_metric_ids(1);
  for (const Metadata& metadata :
       std::vector<Metadata>{{},
                             {{"authorization", testing::Bearer(tenants_.key)}},
                             {{kInternalCredentialMetadata, "another-installation-credential"}}}) {
    v1::ReserveCreditsResponse reserved;
    EXPECT_EQ(stub_->ReserveCredits(ContextWith(metadata).get(), reserve, &reserved).error_code(),
              grpc::UNAUTHENTICATED);
    v1::RefundCreditsResponse refunded;
    EXPECT_EQ(stub_->RefundCredits(ContextWith(metadata).get(), refund, &refunded).error_code(),
              grpc::UNAUTHENTICATED);
  }
  // The same requests with the credential go through.
  v1::ReserveCreditsResponse reserved;
  ASSERT_GRPC_OK(stub_->ReserveCredits(InternalContext().get(), reserve, &reserved));
  EXPECT_TRUE(reserved.reserved());
  EXPECT_EQ(reserved.balance(), 100000 - 5);
  v1::RefundCreditsResponse refunded;
  ASSERT_GRPC_OK(stub_->RefundCredits(InternalContext().get(), refund, &refunded));
  EXPECT_EQ(refunded.refunded(), 5);
  EXPECT_EQ(accounts_store_->GetWorkspace(tenants_.own)->credit_balance, 100000);
}

// The calls role's ledger client against this adapter: a reservation made twice charges once, a
// short balance is an answer, a refund asked twice gives back once.
TEST_P(AccountsServiceTest, RemoteCreditsReserveAndRefundOnce) {
  std::unique_ptr<calls::Credits> credits =
      calls::NewGrpcCredits(CreateInternalChannel(server_->address(), kTestInternalCredential));
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<calls::Credits::Reservation> r =
        credits->Reserve(tenants_.own, 7002, {{1, 1}, {101, 3}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->reserved);
    EXPECT_EQ(r->cost, attempt == 0 ? 4 : 0);
    EXPECT_EQ(r->balance, 100000 - 4);
  }
  absl::StatusOr<calls::Credits::Reservation> too_much =
      credits->Reserve(tenants_.own, 7003, {{1, 200000}});
  ASSERT_TRUE(too_much.ok()) << too_much.status();
  EXPECT_FALSE(too_much->reserved);
  EXPECT_EQ(too_much->balance, 100000 - 4);
  ASSERT_TRUE(credits->Refund(tenants_.own, 7002, {101}).ok());
  ASSERT_TRUE(credits->Refund(tenants_.own, 7002, {101}).ok());
  EXPECT_EQ(accounts_store_->GetWorkspace(tenants_.own)->credit_balance, 100000 - 1);
  // Errors keep their code across the hop.
  EXPECT_EQ(credits->Reserve(987654, 7004, {{1, 1}}).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(AccountsServiceTest, GetCurrentWorkspaceInProcessAnswersLikeTheRpc) {
  struct Case {
    std::string authorization;
    std::optional<int64_t> client_id;
  };
  for (const Case& c : std::vector<Case>{{testing::Bearer(tenants_.key), std::nullopt},
                                         {testing::Bearer(tenants_.key), tenants_.granted},
                                         {testing::Bearer(tenants_.key), tenants_.foreign},
                                         {testing::Bearer(tenants_.revoked_key), std::nullopt},
                                         {"", std::nullopt}}) {
    v1::GetCurrentWorkspaceRequest request;
    if (c.client_id) request.set_client_id(*c.client_id);
    v1::Workspace direct, remote;
    const absl::Status direct_status =
        testing::CallInProcess(*service_, "GetCurrentWorkspace", c.authorization, request, &direct);
    Metadata metadata;
    if (!c.authorization.empty()) metadata.push_back({"authorization", c.authorization});
    const grpc::Status remote_status =
        stub_->GetCurrentWorkspace(ContextWith(metadata).get(), request, &remote);
    SCOPED_TRACE(absl::StrCat(c.authorization, " client_id ", c.client_id.value_or(0)));
    if (direct_status.ok()) {
      ASSERT_GRPC_OK(remote_status);
      EXPECT_EQ(direct.SerializeAsString(), remote.SerializeAsString());
    } else {
      testing::ExpectSameOutcome(direct_status, remote_status);
    }
  }
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AccountsServiceTest);

}  // namespace
}  // namespace calleval::accounts
