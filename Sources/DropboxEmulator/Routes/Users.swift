// users/get_current_account and users/get_space_usage.

import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

extension Router {

    func getCurrentAccount() -> Reply {
        .json(.object([
            ("account_id", .string(Router.accountID)),
            ("name", .object([
                ("given_name", .string("Emulator")), ("surname", .string("User")),
                ("familiar_name", .string("Emulator")), ("display_name", .string("Emulator User")),
                ("abbreviated_name", .string("EU")),
            ])),
            ("email", .string("emulator@example.com")),
            ("email_verified", .bool(true)),
            ("disabled", .bool(false)),
            ("country", .string("US")),
            ("locale", .string("en")),
            ("referral_link", .string("https://www.dropbox.com/referrals/emulator")),
            ("is_paired", .bool(false)),
            ("account_type", .object([(".tag", .string(configuration.teamMode ? "business" : "basic"))])),
            ("root_info", rootInfo),
        ]))
    }

    static let allocated: Int64 = 2 * 1024 * 1024 * 1024 * 1024

    func getSpaceUsage() -> Reply {
        let used = Int64(index.usedBytes())
        let allocation: JSON = configuration.teamMode
            ? .object([
                (".tag", .string("team")), ("used", .int(used)), ("allocated", .int(Router.allocated)),
                ("user_within_team_space_allocated", .int(0)),
                ("user_within_team_space_limit_type", .object([(".tag", .string("off"))])),
                ("user_within_team_space_used_cached", .int(used)),
            ])
            : .object([(".tag", .string("individual")), ("allocated", .int(Router.allocated))])
        return .json(.object([("used", .int(used)), ("allocation", allocation)]))
    }
}
