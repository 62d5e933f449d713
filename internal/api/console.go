package api

import "time"

// ChangePasswordRequest is POST /auth/password: the signed-in user's current password
// and the new one, which must meet the registration password policy.
type ChangePasswordRequest struct {
	CurrentPassword string `json:"current_password"`
	NewPassword     string `json:"new_password"`
}

// RenewRecoveryCodesRequest is POST /auth/recovery-codes: the current password,
// since new codes can reset it.
type RenewRecoveryCodesRequest struct {
	CurrentPassword string `json:"current_password"`
}

// RecoveryCodes answers POST /auth/recovery-codes: the new codes, shown this once;
// every earlier code stops working.
type RecoveryCodes struct {
	RecoveryCodes []string `json:"recovery_codes"`
}

// AccountInfo is one account in GET /api/v1/users (admins).
type AccountInfo struct {
	ID        string    `json:"id"`
	Username  string    `json:"username"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// UserList is GET /api/v1/users (admins): every account, oldest first.
type UserList struct {
	Users []AccountInfo `json:"users"`
}
