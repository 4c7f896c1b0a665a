#include "services/calls/credits.h"

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

}  // namespace

std::unique_ptr<Credits> NewStoreCredits(accounts::AccountsStore* accounts) {
  return std::make_unique<StoreCredits>(accounts);
}

}  // namespace calleval::calls
