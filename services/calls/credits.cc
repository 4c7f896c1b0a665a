#include "services/calls/credits.h"

#include <chrono>

#include "calleval/v1/accounts.grpc.pb.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace calleval::calls {
namespace {

class StoreCredits : public Credits {
 public:
  explicit StoreCredits(accounts::AccountsStore* accounts) : accounts_(accounts) {}

  absl::StatusOr<Reservation> Reserve(int64_t workspace_id, int64_t call_id,
                                      const std::vector<Charge>& charges) override {
    std::vector<accounts::CreditCharge> lines;
    lines.reserve(charges.size());
    for (const Charge& c : charges) lines.push_back({c.metric_id, c.cost});
    ASSIGN_OR_RETURN(accounts::Reservation r, accounts_->Reserve(workspace_id, call_id, lines));
    return Reservation{r.reserved, r.cost, r.balance};
  }

  absl::Status Refund(int64_t workspace_id, int64_t call_id,
                      const std::vector<int64_t>& metric_ids) override {
    return accounts_->Refund(workspace_id, call_id, metric_ids).status();
  }

 private:
  accounts::AccountsStore* accounts_;
};

// A reservation or refund waits for a commit on the accounts role; past this the calls role
// gives the claim back (or leaves the refund owed) and tries again later, which is safe.
constexpr std::chrono::seconds kLedgerDeadline(10);

class GrpcCredits : public Credits {
 public:
  explicit GrpcCredits(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Accounts::NewStub(std::move(channel))) {}

  absl::StatusOr<Reservation> Reserve(int64_t workspace_id, int64_t call_id,
                                      const std::vector<Charge>& charges) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kLedgerDeadline);
    v1::ReserveCreditsRequest request;
    request.set_workspace_id(workspace_id);
    request.set_call_id(call_id);
    for (const Charge& c : charges) {
      v1::CreditCharge* charge = request.add_charges();
      charge->set_metric_id(c.metric_id);
      charge->set_cost(c.cost);
    }
    v1::ReserveCreditsResponse reply;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->ReserveCredits(&context, request, &reply)));
    return Reservation{reply.reserved(), reply.cost(), reply.balance()};
  }

  absl::Status Refund(int64_t workspace_id, int64_t call_id,
                      const std::vector<int64_t>& metric_ids) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kLedgerDeadline);
    v1::RefundCreditsRequest request;
    request.set_workspace_id(workspace_id);
    request.set_call_id(call_id);
    for (int64_t id : metric_ids) request.add_metric_ids(id);
    v1::RefundCreditsResponse reply;
    return FromGrpcStatus(stub_->RefundCredits(&context, request, &reply));
  }

 private:
  std::unique_ptr<v1::Accounts::Stub> stub_;
};

}  // namespace

std::unique_ptr<Credits> NewGrpcCredits(std::shared_ptr<grpc::Channel> accounts) {
  return std::make_unique<GrpcCredits>(std::move(accounts));
}

std::unique_ptr<Credits> NewStoreCredits(accounts::AccountsStore* accounts) {
  return std::make_unique<StoreCredits>(accounts);
}

}  // namespace calleval::calls
